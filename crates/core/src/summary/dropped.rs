//! What a compaction dropped: the identifiers of the compacted span (user requests, errors,
//! files, commands) that the summary in force no longer names, ranked, so that a user or an
//! agent sees what it would have to `context.expand` to get back.
//!
//! Presence is textual: an identifier counts as kept when the summary's text contains it (a
//! request when its opening is there). A list the budget compressed into "and N more in …"
//! therefore reports the paths it no longer names one by one, which is what was lost to the
//! model's eye even though the archive range is still cited.

use std::collections::HashMap;

use aho_corasick::AhoCorasick;
use satchel_protocol::{DroppedIdentifier, DroppedKind, MessageFormat};
use serde_json::Value;

use super::extract::text::{collapse_ws, cut_chars};
use super::span::{Span, SpanFacts};

/// Characters of a request's opening that must appear in the summary for it to count as kept.
const REQUEST_OPENING_CHARS: usize = 60;

/// What a span names, read once (before its summary exists, so on another core while the
/// summariser runs): its facts and each message's JSON text.
pub struct SpanIdentifiers {
    facts: SpanFacts,
    /// JSON text of each message, where mentions are counted.
    texts: Vec<String>,
    /// Original index of each message.
    indices: Vec<usize>,
}

impl SpanIdentifiers {
    /// Reads the span `messages` (original indices `indices`).
    pub fn read(
        messages: &[Value],
        indices: &[usize],
        format: MessageFormat,
        demonstration_prefixes: Option<&[String]>,
    ) -> Self {
        let facts = SpanFacts::read(&Span {
            messages,
            indices,
            format,
            demonstration_prefixes,
            kept: &[],
        });
        SpanIdentifiers {
            facts,
            texts: messages.iter().map(Value::to_string).collect(),
            indices: indices.to_vec(),
        }
    }

    /// Ranks the identifiers that `summary_text` does not contain: requests first, then
    /// constraints, errors, modified files, commands and read files; within a kind, the most
    /// often mentioned first, then the earliest. At most `limit`.
    pub fn dropped(&self, summary_text: &str, limit: usize) -> Vec<DroppedIdentifier> {
        let facts = &self.facts;
        let mut dropped = Vec::new();
        for request in facts.requests.iter().filter(|r| !r.demonstration) {
            let text = collapse_ws(request.text.trim_end_matches('…'));
            let (opening, _) = cut_chars(&text, REQUEST_OPENING_CHARS);
            if !summary_text.contains(opening) {
                dropped.push(DroppedIdentifier {
                    kind: DroppedKind::Request,
                    text: request.text.clone(),
                    index: request.index,
                    mentions: 1,
                });
            }
        }
        let lists = [
            (DroppedKind::Constraint, &facts.constraints.items),
            (DroppedKind::Error, &facts.errors.items),
            (DroppedKind::FileModified, &facts.files_modified.items),
            (DroppedKind::Command, &facts.commands.items),
            (DroppedKind::FileRead, &facts.files_read.items),
        ];
        let mut seen: HashMap<&str, ()> = HashMap::new();
        // (rank of the kind, kind, item), in the lists' order.
        let absent: Vec<(usize, DroppedKind, &String)> = lists
            .into_iter()
            .enumerate()
            .flat_map(|(rank, (kind, items))| items.iter().map(move |item| (rank, kind, item)))
            .filter(|(_, kind, item)| !(*kind == DroppedKind::Command && is_tool_key(item)))
            .filter(|(_, _, item)| !summary_text.contains(item.as_str()) && seen.insert(item, ()).is_none())
            .collect();
        // Mentions are found in the messages' JSON text: search each identifier as JSON writes
        // it (a `"` is `\"` there), without the `…` of a shortened one, and an error line by
        // its opening words (a result quotes it, maybe in another shape).
        let needles: Vec<[String; 2]> = absent
            .iter()
            .map(|(_, kind, item)| {
                let item = item.trim_end_matches('…');
                let item = match kind {
                    DroppedKind::Error => cut_chars(item, 40).0,
                    _ => item,
                };
                // Once escaped in a message's text; twice in a tool call's `arguments`, a JSON
                // text inside a JSON string.
                let once = json_needle(item);
                let twice = json_needle(&once);
                [once, twice]
            })
            .collect();
        let counts = mentions(&self.texts, &self.indices, &needles);
        let mut ranked: Vec<(usize, DroppedIdentifier)> = absent
            .iter()
            .zip(counts)
            .map(|(&(rank, kind, item), (index, mentions))| {
                let identifier = DroppedIdentifier {
                    kind,
                    text: item.clone(),
                    index,
                    mentions,
                };
                (rank, identifier)
            })
            .collect();
        // Kinds in the lists' order; within one, the most mentioned first, then the earliest.
        ranked.sort_by_key(|(rank, d)| (*rank, std::cmp::Reverse(d.mentions), d.index));
        dropped.extend(ranked.into_iter().map(|(_, d)| d));
        dropped.truncate(limit);
        dropped
    }
}

/// For each needle: the original index of the first message whose JSON text contains it,
/// and in how many messages it occurs (at least 1). One pass over the span's text for all
/// needles at once: a compaction of a large span drops hundreds of identifiers, and a search
/// per identifier read megabytes each time.
fn mentions<const N: usize>(texts: &[String], indices: &[usize], needles: &[[String; N]]) -> Vec<(usize, usize)> {
    let span_start = indices.first().copied().unwrap_or(0);
    // Each identifier's forms are patterns of their own, mapped back to it.
    let patterns: Vec<&str> = needles.iter().flatten().map(String::as_str).collect();
    let searcher = match AhoCorasick::new(&patterns) {
        Ok(searcher) if !patterns.is_empty() => searcher,
        _ => return vec![(span_start, 1); needles.len()],
    };
    let mut found = vec![(None::<usize>, 0usize); needles.len()];
    // The message in which each needle was last counted, so a message counts once.
    let mut counted_in = vec![usize::MAX; needles.len()];
    for (position, text) in texts.iter().enumerate() {
        for hit in searcher.find_overlapping_iter(text) {
            let needle = hit.pattern().as_usize() / N;
            if counted_in[needle] != position {
                counted_in[needle] = position;
                let (first, count) = &mut found[needle];
                first.get_or_insert(indices.get(position).copied().unwrap_or(position));
                *count += 1;
            }
        }
    }
    // Every identifier came from the span: one not found (quoted in a shape of its own) is
    // placed at the span's start rather than at message 0.
    found
        .into_iter()
        .map(|(first, count)| (first.unwrap_or(span_start), count.max(1)))
        .collect()
}

/// `text` as it appears inside a JSON string.
fn json_needle(text: &str) -> String {
    let quoted = serde_json::to_string(text).unwrap_or_default();
    quoted
        .strip_prefix('"')
        .and_then(|q| q.strip_suffix('"'))
        .unwrap_or(&quoted)
        .to_owned()
}

/// A call listed as `name(key=value, …)` rather than a shell command: the files it names are
/// reported as files, so it is not reported again.
fn is_tool_key(key: &str) -> bool {
    key.split_once('(').is_some_and(|(name, _)| {
        key.ends_with(')') && !name.is_empty() && name.chars().all(|c| c.is_alphanumeric() || "_.-".contains(c))
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn ids(dropped: &[DroppedIdentifier]) -> Vec<String> {
        dropped
            .iter()
            .map(|d| format!("{:?} {} @{} x{}", d.kind, d.text, d.index, d.mentions))
            .collect()
    }

    fn span() -> Vec<Value> {
        vec![
            json!({"role": "user", "content": "Please fix the failing parser tests in crates/parser. Never change the public API."}),
            json!({"role": "assistant", "content": "Looking.", "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\": \"crates/parser/src/lib.rs\"}"}}]}),
            json!({"role": "tool", "tool_call_id": "c1", "content": "pub fn parse() {}"}),
            json!({"role": "assistant", "content": "", "tool_calls": [
                {"id": "c2", "type": "function", "function": {"name": "bash", "arguments": "{\"command\": \"cargo test -p parser\"}"}}]}),
            json!({"role": "tool", "tool_call_id": "c2", "content": "error[E0308]: mismatched types in crates/parser/src/lib.rs\nexit status 101"}),
            json!({"role": "assistant", "content": "", "tool_calls": [
                {"id": "c3", "type": "function", "function": {"name": "edit_file", "arguments": "{\"path\": \"crates/parser/src/expr.rs\"}"}}]}),
            json!({"role": "tool", "tool_call_id": "c3", "content": "ok"}),
        ]
    }

    fn check(summary_text: &str, expected: &[&str]) {
        let span = span();
        let indices: Vec<usize> = (10..10 + span.len()).collect();
        let got = SpanIdentifiers::read(&span, &indices, MessageFormat::Openai, None).dropped(summary_text, 20);
        assert_eq!(ids(&got), expected);
    }

    #[test]
    fn a_summary_that_names_nothing_dropped_everything_ranked_by_kind_then_mentions() {
        check(
            "## Goal\n(nothing)",
            &[
                "Request Please fix the failing parser tests in crates/parser. Never change the public API. @10 x1",
                "Constraint Never change the public API. @10 x1",
                "Error error[E0308]: mismatched types in crates/parser/src/lib.rs @14 x1",
                "FileModified crates/parser/src/expr.rs @15 x1",
                "Command cargo test -p parser @13 x1",
                "FileRead crates/parser/src/lib.rs @11 x2",
            ],
        );
    }

    #[test]
    fn what_the_summary_names_is_not_dropped() {
        check(
            "## Goal\nPlease fix the failing parser tests in crates/parser. Never change…\n\
             ## Constraints\n- Never change the public API.\n\
             ## Files\n- crates/parser/src/lib.rs\n- crates/parser/src/expr.rs\n\
             ## Commands\n- `cargo test -p parser`",
            &["Error error[E0308]: mismatched types in crates/parser/src/lib.rs @14 x1"],
        );
    }

    #[test]
    fn quoted_and_shortened_identifiers_are_found_where_they_were_mentioned() {
        let long = format!("cargo test -p parser -- {}", "--skip slow_case ".repeat(20));
        let span = vec![
            json!({"role": "user", "content": "Find where parse is defined."}),
            json!({"role": "assistant", "content": "", "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "bash",
                 "arguments": json!({"command": "grep -rn \"fn parse\" crates/"}).to_string()}}]}),
            json!({"role": "tool", "tool_call_id": "c1", "content": "crates/parser/src/lib.rs:3: pub fn parse() {}"}),
            json!({"role": "assistant", "content": "", "tool_calls": [
                {"id": "c2", "type": "function", "function": {"name": "bash",
                 "arguments": json!({"command": long}).to_string()}}]}),
            json!({"role": "tool", "tool_call_id": "c2", "content": "ok"}),
        ];
        let indices: Vec<usize> = (20..20 + span.len()).collect();
        let got = SpanIdentifiers::read(&span, &indices, MessageFormat::Openai, None).dropped("", 20);
        let commands: Vec<(&str, usize)> = got
            .iter()
            .filter(|d| d.kind == DroppedKind::Command)
            .map(|d| (d.text.as_str(), d.index))
            .collect();
        assert_eq!(commands.len(), 2, "{got:?}");
        assert_eq!(commands[0], ("grep -rn \"fn parse\" crates/", 21));
        assert!(commands[1].0.ends_with('…'), "shortened: {}", commands[1].0);
        assert_eq!(commands[1].1, 23, "{commands:?}");
    }

    #[test]
    fn the_limit_keeps_the_highest_ranked() {
        let span = span();
        let indices: Vec<usize> = (0..span.len()).collect();
        let got = SpanIdentifiers::read(&span, &indices, MessageFormat::Openai, None).dropped("", 2);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].kind, DroppedKind::Request);
        assert_eq!(got[1].kind, DroppedKind::Constraint);
    }
}
