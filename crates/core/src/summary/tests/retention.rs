//! Identifier retention and outcome accuracy on the shared trajectories (`../shared/data`,
//! not part of the repository: without it the test says so and passes).
//!
//! Each trajectory is summarised in consecutive spans of about 30 messages, each merged into
//! the previous summary, as the daemon would; after each span, the summary must contain the
//! span's file paths (not devices, URLs, globs, directories or class literals) (tool-call arguments and user requests; demonstrations are examples,
//! not this session's data), its commands (first line, at most 200 chars), and, for every
//! result labelled a failure in `testdata/outcome_labels.json`, a line of that result. The
//! outcome judge is also compared with those labels: false positives are successes read as
//! failures. `SATCHEL_SHOW_MISSES=1` lists misses; `SATCHEL_SHOW_SUMMARY=<file name part>`
//! prints the summaries of matching trajectories.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

use satchel_protocol::MessageFormat;
use serde_json::Value;

use super::*;
use crate::format;
use crate::summary::extract::calls::CallFacts;
use crate::summary::extract::outcome::failure_line;
use crate::summary::extract::paths::{is_junk, is_not_a_file, prose_path_tokens};
use crate::summary::extract::prose::{DEMONSTRATION_PREFIXES, is_demonstration};
use crate::summary::render::summary_message_text;

const SPAN: usize = 30;
const MAX_TOKENS: u64 = 2500;

#[derive(Default)]
struct Tally {
    paths: (usize, usize),
    commands: (usize, usize),
    errors: (usize, usize),
    /// Outcome judge against the labels: (failures found, successes read as failures,
    /// failures missed), and the same for the keyword rule it replaced.
    judge: (usize, usize, usize),
    keywords: (usize, usize, usize),
    max_tokens: u64,
    misses: Vec<String>,
}

fn count(found: bool, tally: &mut (usize, usize), what: &str, misses: &mut Vec<String>) {
    tally.1 += 1;
    if found {
        tally.0 += 1;
    } else {
        misses.push(what.to_owned());
    }
}

/// Path-like words, found independently of the summariser (but for what it calls junk).
fn loose_paths(text: &str) -> Vec<String> {
    text.split(|c: char| c.is_whitespace() || "`'\"(),;<>[]{}=|*".contains(c))
        .map(|t| t.trim_matches(|c| ":.!?#".contains(c)))
        .filter(|t| {
            !t.starts_with('-')
                && !is_junk(t)
                && !is_not_a_file(t)
                && t.chars().any(|c| c.is_ascii_alphabetic())
                && t.chars().all(|c| c.is_ascii_alphanumeric() || "_.~/@+-".contains(c))
                && (t.contains('/')
                    || t.rsplit_once('.').is_some_and(|(stem, ext)| {
                        !stem.is_empty()
                            && (1..=8).contains(&ext.len())
                            && ext.starts_with(|c: char| c.is_ascii_alphabetic())
                            && ext.chars().all(|c| c.is_ascii_alphanumeric())
                    }))
        })
        .map(str::to_owned)
        .collect()
}

/// The rule errors were found by before outcomes: a line with an error word.
fn keyword_error(text: &str) -> bool {
    const CUES: &[&str] = &[
        "error",
        "exception",
        "traceback",
        "failed",
        "fatal",
        "panicked",
        "cannot",
        "not found",
        "no such file",
    ];
    text.lines().any(|l| {
        let mut lower = l.to_lowercase();
        for zero in [
            "0 failed",
            "0 errors",
            "0 error",
            "no errors",
            "errors: 0",
            "failed: 0",
            "failures: 0",
        ] {
            lower = lower.replace(zero, " ");
        }
        CUES.iter().any(|c| lower.contains(c))
    })
}

impl Tally {
    fn measure(&mut self, span: &[Value], format: MessageFormat, text: &str, labels: &HashMap<String, String>) {
        let mut paths = Vec::new();
        let mut commands = Vec::new();
        let mut calls: HashMap<String, CallFacts> = HashMap::new();
        let mut current = None;
        for message in span {
            if message["role"] == "user" {
                for t in super::super::span::text_blocks(message) {
                    if !is_demonstration(t, DEMONSTRATION_PREFIXES) {
                        paths.extend(prose_path_tokens(t).into_iter().map(str::to_owned));
                    }
                }
            }
            for call in format::tool_calls(message, format) {
                let args: Value = serde_json::from_str(&call.arguments).unwrap_or(Value::Null);
                if let Some(command) = ["command", "cmd", "script"].iter().find_map(|k| args[k].as_str()) {
                    let first = command.split('\n').next().unwrap_or("").trim_end_matches('\r');
                    commands.push(first.chars().take(200).collect::<String>());
                }
                let mut strings = Vec::new();
                collect(&args, &mut strings);
                strings.iter().for_each(|s| paths.extend(loose_paths(s)));
                calls.insert(call.id.clone(), CallFacts::of(&call, &mut current));
            }
            let texts = format::result_texts(message, format);
            for id in format::result_ids(message, format) {
                let body: Vec<&str> = texts
                    .iter()
                    .filter(|t| t.call_id.as_deref().unwrap_or("") == id)
                    .filter_map(|t| message.pointer(&t.pointer)?.as_str())
                    .collect();
                let body = body.join("\n");
                let Some(label) = labels.get(&id) else { continue };
                let failure = label == "failure";
                let looks_only = calls.get(&id).is_some_and(|c| c.read_only);
                let judged = failure_line(&body, false, looks_only).is_some();
                for (tally, said) in [(&mut self.judge, judged), (&mut self.keywords, keyword_error(&body))] {
                    match (failure, said) {
                        (true, true) => tally.0 += 1,
                        (false, true) => tally.1 += 1,
                        (true, false) => tally.2 += 1,
                        (false, false) => {}
                    }
                }
                if failure {
                    let kept = body
                        .lines()
                        .map(str::trim)
                        .filter(|l| l.chars().count() >= 8)
                        .any(|l| text.contains(&l.chars().take(300).collect::<String>()));
                    count(kept, &mut self.errors, &format!("error of {id}"), &mut self.misses);
                }
            }
        }
        for (items, tally) in [(paths, &mut self.paths), (commands, &mut self.commands)] {
            let mut seen = HashSet::new();
            for item in items {
                if seen.insert(item.clone()) {
                    count(text.contains(&item), tally, &item, &mut self.misses);
                }
            }
        }
    }
}

fn collect<'a>(value: &'a Value, out: &mut Vec<&'a str>) {
    match value {
        Value::String(s) => out.push(s),
        Value::Array(items) => items.iter().for_each(|v| collect(v, out)),
        Value::Object(map) => map.values().for_each(|v| collect(v, out)),
        _ => {}
    }
}

fn pct((kept, total): (usize, usize)) -> f64 {
    if total == 0 {
        100.0
    } else {
        100.0 * kept as f64 / total as f64
    }
}

#[test]
fn retention_and_outcomes_on_shared_trajectories() {
    let dir = shared_data();
    if !dir.join("trajectories").is_dir() {
        eprintln!("SKIPPED: no shared data at {} (set SATCHEL_SHARED_DATA)", dir.display());
        return;
    }
    let labels = outcome_labels();
    let counter = counter();
    let mut total = Tally::default();
    for (sub, format) in [
        ("trajectories", MessageFormat::Openai),
        ("trajectories_anthropic", MessageFormat::Anthropic),
    ] {
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir.join(sub))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "json"))
            .collect();
        files.sort();
        for file in files {
            let stem = file.file_stem().unwrap().to_string_lossy().into_owned();
            let doc: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
            let messages: Vec<Value> = doc["messages"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|m| m["role"] != "system")
                .cloned()
                .collect();
            let mut one = Tally::default();
            let mut previous: Option<CompactSummary> = None;
            let mut start = 0;
            while start < messages.len() {
                // Like the daemon, never separate a result from its call.
                let mut end = (start + SPAN).min(messages.len());
                while end < messages.len() && format::has_tool_result(&messages[end], format) {
                    end += 1;
                }
                let span = &messages[start..end];
                let mut case = Case::new(span.to_vec()).budget(MAX_TOKENS);
                case.format = format;
                case.first_index = start;
                case.previous = previous.as_ref();
                let summary = case.summarize();
                let text = summary_message_text(&summary);
                one.max_tokens = one.max_tokens.max(counter.count_text(&text));
                one.measure(span, format, &render_summary(&summary), &labels[&stem]);
                if std::env::var_os("SATCHEL_SHOW_SUMMARY")
                    .is_some_and(|v| file.to_string_lossy().contains(&*v.to_string_lossy()))
                {
                    eprintln!("=== {start}..{end}\n{text}");
                }
                previous = Some(summary);
                start = end;
            }
            eprintln!(
                "{sub}/{stem}: paths {:.1}% commands {:.1}% errors {:.1}% max {} tokens",
                pct(one.paths),
                pct(one.commands),
                pct(one.errors),
                one.max_tokens
            );
            if std::env::var_os("SATCHEL_SHOW_MISSES").is_some() && !one.misses.is_empty() {
                eprintln!("  missed: {:?}", one.misses);
            }
            for (sum, part) in [
                (&mut total.paths, one.paths),
                (&mut total.commands, one.commands),
                (&mut total.errors, one.errors),
            ] {
                sum.0 += part.0;
                sum.1 += part.1;
            }
            for (sum, part) in [(&mut total.judge, one.judge), (&mut total.keywords, one.keywords)] {
                sum.0 += part.0;
                sum.1 += part.1;
                sum.2 += part.2;
            }
            total.max_tokens = total.max_tokens.max(one.max_tokens);
        }
    }
    eprintln!(
        "retention: paths {:.1}% ({}/{}), commands {:.1}% ({}/{}), errors {:.1}% ({}/{}); max summary message {} tokens",
        pct(total.paths),
        total.paths.0,
        total.paths.1,
        pct(total.commands),
        total.commands.0,
        total.commands.1,
        pct(total.errors),
        total.errors.0,
        total.errors.1,
        total.max_tokens
    );
    eprintln!(
        "outcomes against the labels (both formats): failures found {}, false errors {}, failures missed {} \
         (keyword rule: found {}, false errors {}, missed {})",
        total.judge.0, total.judge.1, total.judge.2, total.keywords.0, total.keywords.1, total.keywords.2
    );
    assert!(pct(total.paths) >= 99.0);
    assert!(pct(total.commands) >= 99.0);
    assert!(pct(total.errors) >= 95.0);
    assert!(
        total.judge.1 * 10 <= total.keywords.1,
        "false errors must fall at least tenfold"
    );
    assert!(total.judge.2 <= total.keywords.2, "and no more failures missed");
    assert!(total.max_tokens < 3000);
}
