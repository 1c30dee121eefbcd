//! The text analysis both sides of BM25 share: chunks are indexed as `terms(text)` and queries
//! are matched as `terms(query)`, so whatever this function does, it does to both.
//!
//! - Words are runs of letters, digits, marks and `_` (split by extended grapheme clusters, so a
//!   combining mark or a virama stays in its word), lowercased, English stop words dropped and
//!   stemmed with Snowball's English stemmer, so `reconnecting` matches `reconnected`.
//! - Numbers are kept as they are; `3.14` and `1.2.3` stay one term.
//! - Identifiers stay searchable: `handleWebSocketReconnect`, `ECONNREFUSED` and `snake_case`
//!   are kept whole (lowercased), and composite ones also yield their parts
//!   (`handle`, `web`, `socket`, `reconnect`), so a query for one part finds them too.
//! - CJK (Han, Hiragana, Katakana, Hangul) has no spaces between words, so its runs become
//!   overlapping character bigrams (`记忆系统` → `记忆`, `忆系`, `系统`; a lone character is a
//!   unigram): a CJK query then matches CJK text without a dictionary.
//!
//! Terms never contain whitespace or ASCII punctuation other than `_` and `.`: the FTS5 table
//! splits the joined terms on exactly those boundaries (see `store`).

use std::collections::HashSet;
use std::sync::LazyLock;

use rust_stemmers::{Algorithm, Stemmer};
use unicode_segmentation::UnicodeSegmentation;

/// Longer words are skipped (their parts are still indexed): past this length a "word" is a
/// base64 blob or a minified line, and indexing it only bloats the term dictionary. A git SHA
/// (40) or a long identifier still fits.
const MAX_TERM_CHARS: usize = 64;

/// Snowball's English stop word list (snowballstem.org, `english/stop.txt`), with the
/// apostrophe forms: frequent words that carry no topic. Month names such as `may` are not in
/// it, which matters for dated memories.
const STOP_WORDS: &str = "\
    a about above after again against all am an and any are aren't as at be because been before being \
    below between both but by can't cannot could couldn't did didn't do does doesn't doing don't down \
    during each few for from further had hadn't has hasn't have haven't having he he'd he'll he's her \
    here here's hers herself him himself his how how's i i'd i'll i'm i've if in into is isn't it it's \
    its itself let's me more most mustn't my myself no nor not of off on once only or other ought our \
    ours ourselves out over own same shan't she she'd she'll she's should shouldn't so some such than \
    that that's the their theirs them themselves then there there's these they they'd they'll they're \
    they've this those through to too under until up very was wasn't we we'd we'll we're we've were \
    weren't what what's when when's where where's which while who who's whom why why's with won't would \
    wouldn't you you'd you'll you're you've your yours yourself yourselves";

static STOP_SET: LazyLock<HashSet<&'static str>> = LazyLock::new(|| STOP_WORDS.split_whitespace().collect());

/// The stemmer is a table of function pointers: built once, shared by every thread.
static STEMMER: LazyLock<Stemmer> = LazyLock::new(|| Stemmer::create(Algorithm::English));

/// The index terms of `text`, in order of appearance (duplicates kept: they are term
/// frequencies). Used on documents and queries alike.
pub fn terms(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut cjk: Vec<&str> = Vec::new();
    let mut graphemes = units(text).peekable();
    while let Some(grapheme) = graphemes.next() {
        let first = grapheme.chars().next().unwrap_or(' ');
        if is_cjk(first) {
            push_word(&mut out, &mut word);
            cjk.push(grapheme);
            continue;
        }
        push_bigrams(&mut out, &mut cjk);
        if first.is_alphanumeric() || first == '_' {
            word.push_str(grapheme);
        } else if !word.is_empty() && joins_word(first, &word, graphemes.peek().copied()) {
            // An apostrophe inside a word is kept for the stemmer (`user's` → `user`), then
            // dropped; a dot between digits keeps a number or version whole.
            word.push(if first == '.' { '.' } else { '\'' });
        } else {
            push_word(&mut out, &mut word);
        }
    }
    push_word(&mut out, &mut word);
    push_bigrams(&mut out, &mut cjk);
    out
}

/// The text as extended grapheme clusters, so marks stay with their letter; a cluster that
/// swallowed ASCII or whitespace (a prepended mark such as Malayalam's dot reph before a space)
/// is taken char by char instead, so it cannot glue a separator into a term.
fn units(text: &str) -> impl Iterator<Item = &str> {
    text.graphemes(true).flat_map(|grapheme| {
        let mixed = grapheme.chars().skip(1).any(|c| c.is_ascii() || c.is_whitespace());
        let mut rest = grapheme;
        std::iter::from_fn(move || {
            let len = if mixed {
                rest.chars().next()?.len_utf8()
            } else {
                rest.len()
            };
            let (unit, tail) = rest.split_at_checked(len).filter(|_| len > 0)?;
            rest = tail;
            Some(unit)
        })
    })
}

/// Whether the punctuation `c` between `word` and `next` belongs to the word.
fn joins_word(c: char, word: &str, next: Option<&str>) -> bool {
    let next = next.and_then(|g| g.chars().next());
    let before = word.chars().next_back();
    match c {
        '\'' | '’' => before.is_some_and(char::is_alphabetic) && next.is_some_and(char::is_alphabetic),
        '.' => before.is_some_and(|b| b.is_ascii_digit()) && next.is_some_and(|n| n.is_ascii_digit()),
        _ => false,
    }
}

/// Han, Hiragana, Katakana and Hangul: the scripts written without spaces between words.
fn is_cjk(c: char) -> bool {
    matches!(c,
        '\u{1100}'..='\u{11FF}'     // Hangul Jamo
        | '\u{3005}'..='\u{3007}'   // 々 〆 〇
        | '\u{3040}'..='\u{30FF}'   // Hiragana, Katakana
        | '\u{3130}'..='\u{318F}'   // Hangul compatibility Jamo
        | '\u{31F0}'..='\u{31FF}'   // Katakana phonetic extensions
        | '\u{3400}'..='\u{4DBF}'   // CJK extension A
        | '\u{4E00}'..='\u{9FFF}'   // CJK unified ideographs
        | '\u{A960}'..='\u{A97F}'   // Hangul Jamo extended A
        | '\u{AC00}'..='\u{D7AF}'   // Hangul syllables
        | '\u{F900}'..='\u{FAFF}'   // CJK compatibility ideographs
        | '\u{FF66}'..='\u{FF9F}'   // half-width Katakana
        | '\u{20000}'..='\u{3134F}' // CJK extensions B–G, compatibility supplement
    )
}

/// Emits the overlapping bigrams of a CJK run (a lone character as itself) and clears it.
fn push_bigrams(out: &mut Vec<String>, run: &mut Vec<&str>) {
    match run.len() {
        0 => {}
        1 => out.push(run[0].to_owned()),
        _ => out.extend(run.windows(2).map(|pair| pair.concat())),
    }
    run.clear();
}

/// Emits the terms of one word (itself, and its parts when it is an identifier) and clears it.
fn push_word(out: &mut Vec<String>, word: &mut String) {
    if word.chars().any(char::is_alphanumeric) {
        let parts = identifier_parts(word);
        push_term(out, &word.to_lowercase());
        if parts.len() > 1 || parts.first().is_some_and(|p| p.len() != word.len()) {
            for part in parts {
                push_term(out, &part.to_lowercase());
            }
        }
    }
    word.clear();
}

/// One lowercased word → its term, unless it is a stop word or too long.
fn push_term(out: &mut Vec<String>, lower: &str) {
    if lower.chars().count() > MAX_TERM_CHARS || STOP_SET.contains(lower) || !lower.chars().any(char::is_alphanumeric) {
        return;
    }
    // Only alphabetic words are stemmed: `10k` or `x86_64` would come out mangled.
    let term = if lower.chars().all(|c| c.is_alphabetic() || c == '\'') {
        STEMMER.stem(lower).replace('\'', "")
    } else {
        lower.replace('\'', "")
    };
    if !term.is_empty() {
        out.push(term);
    }
}

/// The parts of an identifier: split at `_` and `.`, and at camelCase boundaries
/// (`handleWebSocket` → `handle`, `Web`, `Socket`; `HTTPServer` → `HTTP`, `Server`).
fn identifier_parts(word: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    for piece in word.split(['_', '.']).filter(|p| !p.is_empty()) {
        let chars: Vec<(usize, char)> = piece.char_indices().collect();
        let mut start = 0;
        for i in 1..chars.len() {
            let (at, c) = chars[i];
            let prev = chars[i - 1].1;
            let next_lower = chars.get(i + 1).is_some_and(|&(_, n)| n.is_lowercase());
            let boundary = c.is_uppercase() && (prev.is_lowercase() || (prev.is_uppercase() && next_lower));
            if boundary {
                parts.push(&piece[start..at]);
                start = at;
            }
        }
        parts.push(&piece[start..]);
    }
    parts
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn check(text: &str, expected: &[&str]) {
        assert_eq!(terms(text), expected, "terms of {text:?}");
    }

    #[test]
    fn words_are_lowercased_stemmed_and_stop_words_dropped() {
        check(
            "The user prefers reconnecting quickly after disconnections",
            &["user", "prefer", "reconnect", "quick", "disconnect"],
        );
        check("It was what they would have done", &["done"]);
        check("running runs ran", &["run", "run", "ran"]);
    }

    #[test]
    fn apostrophes_stay_in_the_word_for_the_stemmer() {
        check("the user's choice", &["user", "choic"]);
        check("Don't ignore Melanie’s o'clock", &["ignor", "melani", "oclock"]);
    }

    #[test]
    fn numbers_versions_and_dates_are_kept() {
        check(
            "Date: 1:56 pm on 8 May, 2023",
            &["date", "1", "56", "pm", "8", "may", "2023"],
        );
        check(
            "pi is 3.14, v1.2.3 released 2026-11-22",
            &[
                "pi", "3.14", "3", "14", "v1.2.3", "v1", "2", "3", "releas", "2026", "11", "22",
            ],
        );
        check("version 2.", &["version", "2"]);
    }

    #[test]
    fn identifiers_are_kept_whole_and_split_into_parts() {
        check(
            "handleWebSocketReconnect",
            &["handlewebsocketreconnect", "handl", "web", "socket", "reconnect"],
        );
        check("ECONNREFUSED", &["econnrefus"]);
        check(
            "HTTPServer x86_64",
            &["httpserver", "http", "server", "x86_64", "x86", "64"],
        );
        check("snake_case_name", &["snake_case_name", "snake", "case", "name"]);
        check("__init__ ___", &["__init__", "init"]);
    }

    #[test]
    fn cjk_runs_become_bigrams() {
        check("记忆系统", &["记忆", "忆系", "系统"]);
        check("用Rust写的记忆", &["用", "rust", "写的", "的记", "记忆"]);
        check("メモリ検索", &["メモ", "モリ", "リ検", "検索"]);
        check("한국어 검색", &["한국", "국어", "검색"]);
        check("字", &["字"]);
    }

    #[test]
    fn other_scripts_keep_their_marks_in_the_word() {
        check("हिन्दी भाषा", &["हिन्दी", "भाषा"]);
        check("Ärger über Straße", &["ärger", "über", "straße"]);
        // A prepended mark before a space forms one cluster with it; the space still separates.
        check("ൎ x", &["ൎ", "x"]);
    }

    #[test]
    fn overlong_words_are_skipped() {
        let blob = "a".repeat(MAX_TERM_CHARS + 1);
        check(&format!("{blob} kept"), &["kept"]);
    }

    #[test]
    fn stop_words_are_lowercase_and_unique() {
        assert_eq!(STOP_SET.len(), STOP_WORDS.split_whitespace().count());
        assert!(STOP_WORDS == STOP_WORDS.to_lowercase());
    }

    #[test]
    fn terms_have_no_whitespace_or_stray_punctuation() {
        for term in terms("a-b c/d e.f g'h (i) [j] \"k\" l,m 1.2 n_o ½ Ⅻ ①") {
            assert!(
                term.chars()
                    .all(|c| !c.is_ascii() || c.is_ascii_alphanumeric() || c == '_' || c == '.'),
                "{term:?}"
            );
        }
    }

    proptest! {
        #[test]
        fn terms_never_panic_and_are_clean(text in any::<String>()) {
            for term in terms(&text) {
                prop_assert!(!term.is_empty());
                prop_assert!(!term.chars().any(char::is_whitespace), "{:?}", term);
                prop_assert!(term.chars().all(|c| !c.is_ascii() || c.is_ascii_alphanumeric() || c == '_' || c == '.'));
            }
        }
    }
}
