//! What the newest user message is about (AceClaw's `RequestFocus`); [`super::boost()`] turns it
//! into priority.
//!
//! Extraction is deliberately stricter than AceClaw's regexes, whose "CamelCase" pattern takes
//! any capitalised word of three letters ("Please", "The") for a symbol and whose keyword
//! test is a substring test ("latest" asks for tests, "prefix" for a fix). Here a symbol needs
//! an inner capital, a qualified name, call parentheses or backticks, and signals match whole
//! words.

use satchel_protocol::{PromptSection, RequestFocus};
use serde_json::Value;

use crate::format;

/// Longest query summary, in characters.
pub const MAX_SUMMARY_CHARS: usize = 160;
/// Most file paths kept.
pub const MAX_FILES: usize = 6;
/// Most symbols kept.
pub const MAX_SYMBOLS: usize = 8;
/// Most segments of a qualified name (`a.b.c.d.e.f`).
pub const MAX_SYMBOL_SEGMENTS: usize = 6;

/// Plan signal: the user wants the work to go on.
pub const CONTINUE: &str = "continue current execution";
/// Plan signal: the user asks about the plan.
pub const PLANNING: &str = "planning context";
/// Plan signal: the user asks for a code change.
pub const CODE_CHANGE: &str = "code change requested";
/// Plan signal: the user asks for tests or a review.
pub const VERIFICATION: &str = "verification requested";

/// Extensions that make a word without a slash a file name (`main.rs`), not a qualified
/// symbol (`AppService.validate`), separated by spaces.
const FILE_EXTENSIONS: &str = "bash bat c cc cfg cjs conf cpp cs css csv dart env erl ex exs go gradle h hpp hs html \
    ini ipynb java jl js json jsonl jsx kt kts lock log lua md mdx mjs ml nix php pl properties proto ps1 py rb rs rst \
    sass scala scss sh sql svelte swift tf toml ts tsx txt vue xml yaml yml zig zsh";

/// Slashed words of prose, not paths.
const NOT_PATHS: &str = "and/or either/or yes/no on/off true/false read/write input/output i/o w/o n/a";

/// Directory names repositories use, by convention: a bare `crates/parser` is a path, a bare
/// `inputting/reading` is prose.
const DIRECTORY_NAMES: &str = "src lib libs crates crate tests test spec specs docs doc app apps pkg pkgs cmd \
    internal include scripts bin examples example packages components config configs assets public static vendor \
    build dist target node_modules tools benches bench fixtures testdata modules plugins migrations templates \
    .github .vscode";

/// Whether `word` is one of the space-separated `list`.
fn listed(list: &str, word: &str) -> bool {
    list.split_ascii_whitespace().any(|entry| entry == word)
}

/// The focus of `query`.
pub fn request_focus(query: &str) -> RequestFocus {
    RequestFocus {
        query_summary: summary(query),
        active_file_paths: file_paths(query),
        active_symbols: symbols(query),
        plan_signals: plan_signals(query),
    }
}

/// Whether a focus says nothing (no query, or one of only whitespace).
pub fn is_empty(focus: &RequestFocus) -> bool {
    focus.query_summary.is_empty()
        && focus.active_file_paths.is_empty()
        && focus.active_symbols.is_empty()
        && focus.plan_signals.is_empty()
}

/// Whitespace collapsed; over [`MAX_SUMMARY_CHARS`], cut to 157 characters and `...`.
fn summary(query: &str) -> String {
    let mut out = String::new();
    for (i, word) in query.split_whitespace().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        out.push_str(word);
        if out.len() > 4 * MAX_SUMMARY_CHARS {
            break; // enough to cut from, whatever the rest of a huge query is
        }
    }
    if out.chars().count() <= MAX_SUMMARY_CHARS {
        return out;
    }
    let mut cut: String = out.chars().take(MAX_SUMMARY_CHARS - 3).collect();
    cut.truncate(cut.trim_end().len());
    cut.push_str("...");
    cut
}

/// A whitespace-separated word with the punctuation around it removed, and whether it ended
/// in call parentheses (`validate()`).
fn clean(word: &str) -> (&str, bool) {
    let mut w = word.trim_start_matches(['(', '[', '{', '<', '"', '\'', '`', '*']);
    let mut call = false;
    loop {
        if let Some(rest) = w.strip_suffix("()") {
            (w, call) = (rest, true);
        } else if let Some(rest) = w.strip_suffix("'s") {
            w = rest;
        } else if let Some(rest) =
            w.strip_suffix(['.', ',', ';', ':', '!', '?', ')', ']', '}', '>', '"', '\'', '`', '*'])
        {
            w = rest;
        } else {
            return (w, call);
        }
    }
}

/// `word` as a file path, without a `:line[:col]` suffix, or `None`.
fn as_path(word: &str) -> Option<&str> {
    let mut w = word;
    while let Some((rest, line)) = w.rsplit_once(':') {
        if line.is_empty() || !line.bytes().all(|b| b.is_ascii_digit()) {
            break;
        }
        w = rest;
    }
    let path_char = |c: char| c.is_alphanumeric() || "/\\._-~@+".contains(c);
    if w.contains("://") || !w.chars().all(path_char) || !w.chars().any(char::is_alphabetic) {
        return None;
    }
    let name = w.rsplit(['/', '\\']).next().unwrap_or(w);
    let has_extension = name
        .rsplit_once('.')
        .is_some_and(|(stem, ext)| !stem.is_empty() && listed(FILE_EXTENSIONS, &ext.to_ascii_lowercase()));
    if has_extension {
        return Some(w);
    }
    if !w.contains(['/', '\\']) || listed(NOT_PATHS, &w.to_ascii_lowercase()) {
        return None;
    }
    // Anchored, it is a path. Bare, `a/b` of words is prose ("km/h", "inputting/reading") unless
    // it is deep (`a/b/c`), or a segment looks like code (a digit, `_`, `-`, `.`, a capital
    // after the first letter) or is a conventional directory name (`crates/parser`).
    if w.starts_with(['/', '.', '~']) {
        return Some(w);
    }
    let segments: Vec<&str> = w.split(['/', '\\']).filter(|s| !s.is_empty()).collect();
    let code_like = |s: &&str| {
        listed(DIRECTORY_NAMES, &s.to_ascii_lowercase())
            || s.chars().any(|c| !c.is_alphabetic())
            || s.chars().skip(1).any(char::is_uppercase)
    };
    let long_enough = segments.iter().any(|s| s.chars().count() >= 3);
    (long_enough && (segments.len() >= 3 || segments.iter().any(code_like))).then_some(w)
}

/// File paths of `query`, in order, without repeats.
fn file_paths(query: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for word in query.split_whitespace() {
        if let Some(path) = as_path(clean(word).0)
            && !out.iter().any(|p| p == path)
        {
            out.push(path.to_owned());
            if out.len() == MAX_FILES {
                break;
            }
        }
    }
    out
}

fn is_identifier(s: &str) -> bool {
    let mut bytes = s.bytes();
    bytes.next().is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// `a.b.c` or `a::b::c` of 2 to [`MAX_SYMBOL_SEGMENTS`] identifiers.
fn is_qualified(s: &str) -> bool {
    let mut segments = 0;
    for segment in s.split("::").flat_map(|part| part.split('.')) {
        segments += 1;
        if segments > MAX_SYMBOL_SEGMENTS || !is_identifier(segment) {
            return false;
        }
    }
    segments >= 2
}

/// An identifier with a capital after its first letter and a lower-case letter
/// (`StreamingAgentLoop`, `camelCase`, `HTTPServer`), so neither `Please` nor `README`.
fn is_camel_case(s: &str) -> bool {
    is_identifier(s) && s.bytes().skip(1).any(|b| b.is_ascii_uppercase()) && s.bytes().any(|b| b.is_ascii_lowercase())
}

/// Code symbols of `query`: backtick spans first (any identifier of two characters or more,
/// or a qualified name), then words of the prose that are CamelCase, qualified names with a
/// capital (`AppService.validate`, not `e.g`), or followed by `()`. Paths are never symbols.
fn symbols(query: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut push = |symbol: &str| {
        if out.len() < MAX_SYMBOLS && !out.iter().any(|s| s == symbol) {
            out.push(symbol.to_owned());
        }
    };
    for span in backtick_spans(query) {
        let span = span.trim();
        let span = span.strip_suffix("()").unwrap_or(span);
        if as_path(span).is_none() && ((is_identifier(span) && span.len() >= 2) || is_qualified(span)) {
            push(span);
        }
    }
    for word in query.split_whitespace() {
        let (word, call) = clean(word);
        if as_path(word).is_some() {
            continue;
        }
        let qualified = is_qualified(word) && (call || word.bytes().any(|b| b.is_ascii_uppercase()));
        if qualified || is_camel_case(word) || (call && is_identifier(word) && word.len() >= 2) {
            push(word);
        }
    }
    out
}

/// Texts between pairs of backticks, the way a `` `([^`]+)` `` regex finds them.
fn backtick_spans(query: &str) -> impl Iterator<Item = &str> {
    let mut rest = query;
    std::iter::from_fn(move || {
        loop {
            let open = rest.find('`')?;
            let after = &rest[open + 1..];
            let close = after.find('`')?;
            if close == 0 {
                rest = after; // an empty span: retry from the second backtick
                continue;
            }
            rest = &after[close + 1..];
            return Some(&after[..close]);
        }
    })
}

/// The signals in the order they are listed.
const SIGNALS: [&str; 4] = [CONTINUE, PLANNING, CODE_CHANGE, VERIFICATION];

/// The signal a single word gives (inflections spelled out, no stemming: "latest" is not
/// "test"), as an index into [`SIGNALS`].
fn word_signal(word: &str) -> Option<usize> {
    match word {
        "continue" | "continues" | "continuing" | "resume" | "resumes" | "resuming" => Some(0),
        "plan" | "plans" | "planned" | "planning" => Some(1),
        "fix" | "fixes" | "fixed" | "fixing" | "implement" | "implements" | "implemented" | "implementing" | "edit"
        | "edits" | "edited" | "editing" | "update" | "updates" | "updated" | "updating" | "refactor" | "refactors"
        | "refactored" | "refactoring" | "change" | "changes" | "changed" | "changing" | "add" | "adds" | "added"
        | "adding" => Some(2),
        "test" | "tests" | "tested" | "testing" | "verify" | "verifies" | "verified" | "verifying" | "review"
        | "reviews" | "reviewed" | "reviewing" | "check" | "checks" | "checked" | "checking" => Some(3),
        _ => None,
    }
}

/// The signal a two-word phrase gives ("next step" continues; "next steps" plans).
fn phrase_signal(first: &str, second: &str) -> Option<usize> {
    match (first, second) {
        ("next", "step") | ("go", "on") | ("keep", "going") => Some(0),
        ("next", "steps") | ("steps", "to") => Some(1),
        _ => None,
    }
}

/// Signals of `query`, in the fixed order of [`SIGNALS`]. One pass over the words, so a
/// pasted log costs no more than reading it.
fn plan_signals(query: &str) -> Vec<String> {
    let lower = query.to_lowercase();
    let mut found = [false; SIGNALS.len()];
    let mut previous = "";
    for word in lower.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()) {
        for signal in [word_signal(word), phrase_signal(previous, word)].into_iter().flatten() {
            found[signal] = true;
        }
        if found.iter().all(|f| *f) {
            break;
        }
        previous = word;
    }
    SIGNALS
        .iter()
        .zip(found)
        .filter(|(_, found)| *found)
        .map(|(signal, _)| (*signal).to_owned())
        .collect()
}

/// The text of the newest real user turn: the newest user message with text of its own
/// (OpenAI content string or `text` parts, Anthropic text blocks). Messages carrying only
/// tool results (or only images) are skipped, so in an agent loop the focus stays the request
/// being worked on; a message with results and text ("go on") counts by its text.
///
/// Every format puts user text in a string `content` or in text parts (`text`, Responses
/// `input_text`), and none puts tool results there (OpenAI has `tool` messages, Anthropic
/// `tool_result` blocks, Responses output items), so no format is needed.
pub fn newest_query(messages: &[Value]) -> Option<String> {
    messages.iter().rev().find_map(|message| {
        if message.get("role").and_then(Value::as_str) != Some("user") {
            return None;
        }
        let text = match message.get("content")? {
            Value::String(s) => s.clone(),
            Value::Array(parts) => parts
                .iter()
                .filter(|p| format::is_text_part(p))
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("\n"),
            _ => return None,
        };
        (!text.trim().is_empty()).then_some(text)
    })
}

/// Key of the section listing the focus.
pub const TASK_FOCUS_KEY: &str = "task-focus";
/// Its priority (AceClaw's: just under the base prompt and the protected tiers).
pub const TASK_FOCUS_PRIORITY: i64 = 89;

/// The `task-focus` section that lists the focus for the model; `None` when the message names
/// no file or symbol and asks for nothing the plan signals know: the query alone would only
/// repeat the user's message, which the model reads anyway.
pub fn task_focus_section(focus: &RequestFocus) -> Option<PromptSection> {
    if focus.active_file_paths.is_empty() && focus.active_symbols.is_empty() && focus.plan_signals.is_empty() {
        return None;
    }
    let mut content =
        String::from("# Task Focus\n\nTreat the following request-local signals as the primary focus for this task:\n");
    for (label, value) in [
        ("Query intent", focus.query_summary.clone()),
        ("Active files", focus.active_file_paths.join(", ")),
        ("Active symbols", focus.active_symbols.join(", ")),
        ("Plan signals", focus.plan_signals.join(", ")),
    ] {
        if !value.is_empty() {
            content.push_str(&format!("\n- {label}: {value}"));
        }
    }
    Some(PromptSection {
        key: TASK_FOCUS_KEY.to_owned(),
        content,
        priority: TASK_FOCUS_PRIORITY,
        protected: false,
        source_type: Some(TASK_FOCUS_KEY.to_owned()),
        scope: Some("task-local".to_owned()),
        reason: Some("Derived by satchel from the newest user message: what this request is about.".to_owned()),
        paths: Vec::new(),
    })
}
