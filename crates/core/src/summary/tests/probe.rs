//! The work-memo probe (issue 30) on the shared trajectories (`../shared/data`, not part of
//! the repository: without it the test says so and passes).
//!
//! Every trajectory of a format (OpenAI, Anthropic) is chained into one long session, sorted by
//! file name, ids made unique per run (`t03_` + id), with two facts of the user's injected as
//! user messages of their own: a constraint after the first run's first results, and a
//! "remember for later" fact before the middle run. The session is replayed at each window of
//! [`WINDOWS`] the way the daemon compacts: after every agent step the request is counted, and
//! over the threshold the split of [`plan_split`] is summarised into the summary in force (the
//! extractive summariser, at the window's budget). After every compaction the request text
//! (the summary message and the kept messages' strings, whitespace collapsed) is probed by
//! exact string match for what an agent needs, over everything sent so far:
//!
//! - every user request's first sentence (of its task line, past a template's `ISSUE:` line),
//!   the injected constraint and fact, and the newest request;
//! - every file an edit or a create succeeded on (as its tool result names it, absolute or
//!   below the repository's root);
//! - the last unresolved error (a result labelled a failure in `testdata/outcome_labels.json`
//!   whose command was not run again with success), by one of its lines;
//! - every value found in an output and then used: the CTF flags recovered and submitted;
//!
//! and, in the summary's own lists, what is not true: a step already executed listed as In
//! Progress (the intent of an assistant message whose calls all have results) or Next Steps
//! (a step naming a command or file that a later call used), a failure in Blocked whose
//! command later succeeded, a file in Files modified that no edit succeeded on, a constraint
//! that a demonstration or two requests hold (the framework's template).
//!
//! The table goes to stderr; `SATCHEL_SHOW_MISSES=1` lists what was missed and
//! `SATCHEL_SHOW_SUMMARY=<window>` prints every summary made at that window. Asserted: the shares at 100 % and the untruths at 0 for what
//! the memo already achieves (see [`check_floor`]); the rest is printed so each step of the
//! issue can move its line up.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

use satchel_protocol::{ArchiveRange, CompactSummary, Config, MessageFormat};
use serde_json::{Value, json};

use super::super::extract::prose::{DEMONSTRATION_PREFIXES, is_demonstration};
use super::super::extract::text::collapse_ws;
use super::super::extractive::ExtractiveSummarizer;
use super::super::render::summary_message_text;
use super::super::span::text_blocks;
use super::super::{Summarizer, SummaryInput};
use super::{Labels, outcome_labels, shared_data};
use crate::compact::{TailBudget, is_user_turn, plan_split};
use crate::format;
use crate::tokens::TokenCounter;

/// The windows probed.
const WINDOWS: [u64; 3] = [16_384, 32_768, 131_072];
/// The user's constraint, injected after the first run's first results.
const CONSTRAINT: &str = "Never change a public method signature, and keep every existing test passing.";
/// The user's fact to remember, injected before the middle run.
const REMEMBER: &str = "Remember for later: the staging database listens on port 54329.";

/// One long session of every run of a format, with the label of each (prefixed) call id.
struct Chain {
    messages: Vec<Value>,
    labels: HashMap<String, bool>,
}

fn prefix_ids(message: &mut Value, prefix: &str) {
    if let Some(calls) = message.get_mut("tool_calls").and_then(Value::as_array_mut) {
        for call in calls {
            call["id"] = json!(format!("{prefix}{}", call["id"].as_str().unwrap_or("")));
        }
    }
    if let Some(id) = message.get("tool_call_id").and_then(Value::as_str) {
        message["tool_call_id"] = json!(format!("{prefix}{id}"));
    }
    if let Some(blocks) = message.get_mut("content").and_then(Value::as_array_mut) {
        for block in blocks {
            for key in ["id", "tool_use_id"] {
                if let Some(id) = block.get(key).and_then(Value::as_str) {
                    block[key] = json!(format!("{prefix}{id}"));
                }
            }
        }
    }
}

fn chain(dir: &std::path::Path, format: MessageFormat, labels: &Labels) -> Chain {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    let middle = files.len() / 2;
    let mut chain = Chain {
        messages: Vec::new(),
        labels: HashMap::new(),
    };
    for (run, file) in files.iter().enumerate() {
        let stem = file.file_stem().unwrap().to_string_lossy().into_owned();
        let doc: Value = serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
        let prefix = format!("t{run:02}_");
        if run == middle {
            chain.messages.push(json!({"role": "user", "content": REMEMBER}));
        }
        let mut constraint_due = run == 0;
        for message in doc["messages"].as_array().unwrap() {
            if message["role"] == "system" {
                continue;
            }
            let mut message = message.clone();
            prefix_ids(&mut message, &prefix);
            let results = format::has_tool_result(&message, format);
            // After the first results of the first run: some work has happened.
            if constraint_due && !results && chain.messages.iter().any(|m| format::has_tool_result(m, format)) {
                chain.messages.push(json!({"role": "user", "content": CONSTRAINT}));
                constraint_due = false;
            }
            chain.messages.push(message);
        }
        for (id, label) in labels.get(&stem).into_iter().flatten() {
            chain.labels.insert(format!("{prefix}{id}"), label == "failure");
        }
    }
    chain
}

/// The first sentence of a request's task line: past a template's `ISSUE:` line.
fn first_sentence(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let start = lines.iter().position(|l| l.trim() == "ISSUE:").map_or(0, |i| i + 1);
    let line = lines[start..]
        .iter()
        .map(|l| l.trim())
        .find(|l| !l.is_empty())
        .unwrap_or("");
    let line = collapse_ws(line);
    let end = line.find(". ").map_or(line.len(), |i| i + 1);
    line[..end].chars().take(200).collect()
}

/// What the session sent so far holds, for the probe.
#[derive(Default)]
struct Truth {
    /// First sentences of the user's requests, oldest first.
    requests: Vec<String>,
    /// The injected facts sent so far.
    facts: Vec<&'static str>,
    /// CTF flags (`name{…}`) seen in outputs so far, and the submitted ones among them: a
    /// value found and then used, which the memo must keep.
    flags_found: HashSet<String>,
    flags_used: Vec<String>,
    /// Whole texts of the demonstrations and of the requests, whitespace collapsed.
    demonstrations: Vec<String>,
    request_texts: Vec<String>,
    /// Files edits or creates succeeded on, as their results name them.
    modified: HashSet<String>,
    /// Files only failed edits touched.
    failed_edits: HashSet<String>,
    /// Failures: (command's first line, its output), in order; `None` once fixed.
    failures: Vec<Option<(String, String)>>,
    /// Commands (first line) by call id.
    commands: HashMap<String, String>,
    /// Commands and arguments of every call, in order, with the position of its message.
    call_texts: Vec<(usize, String)>,
    /// Assistant texts with their position.
    assistant_texts: Vec<(usize, String)>,
}

fn command_of(arguments: &str) -> String {
    let args: Value = serde_json::from_str(arguments).unwrap_or(Value::Null);
    let command = ["command", "cmd"].iter().find_map(|k| args[k].as_str()).unwrap_or("");
    command.lines().next().unwrap_or("").trim().chars().take(200).collect()
}

/// CTF flags in a text: `name{…}`, a word of letters, digits and `_` before braces that hold
/// no blank.
fn flags(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (open, _) in text.match_indices('{') {
        let name_start = text[..open]
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .map_or(0, |i| i + 1);
        let Some(close) = text[open..].find('}') else { continue };
        let inner = &text[open + 1..open + close];
        if open > name_start && inner.len() >= 3 && !inner.contains(char::is_whitespace) {
            out.push(text[name_start..=open + close].to_owned());
        }
    }
    out
}

/// The file an edit's or a create's result names: `[File: /repo/path (N lines total)]`.
fn named_file(output: &str) -> Option<String> {
    let rest = output.trim_start().strip_prefix("[File: ")?;
    let end = rest.find(" (")?;
    Some(rest[..end].to_owned())
}

impl Truth {
    fn take(&mut self, position: usize, message: &Value, format: MessageFormat, labels: &HashMap<String, bool>) {
        if is_user_turn(message, format) {
            let text: String = text_blocks(message).collect::<Vec<_>>().join("\n");
            if let Some(fact) = [CONSTRAINT, REMEMBER].into_iter().find(|f| *f == text) {
                self.facts.push(fact);
                return;
            }
            let sentence = first_sentence(&text);
            if is_demonstration(&text, DEMONSTRATION_PREFIXES) {
                self.demonstrations.push(collapse_ws(&text));
            } else if sentence.split(' ').count() >= 3 {
                self.requests.push(sentence);
                self.request_texts.push(collapse_ws(&text));
            }
        }
        let calls = format::tool_calls(message, format);
        if !calls.is_empty() {
            let text: String = text_blocks(message).collect::<Vec<_>>().join("\n");
            self.assistant_texts.push((position, collapse_ws(&text)));
            for call in &calls {
                let command = command_of(&call.arguments);
                if command.starts_with("submit") {
                    let used = flags(&command).into_iter().filter(|f| self.flags_found.contains(f));
                    self.flags_used.extend(used);
                }
                self.commands.insert(call.id.clone(), command);
                self.call_texts
                    .push((position, format!("{} {}", call.name, call.arguments)));
            }
        }
        let texts = format::result_texts(message, format);
        for id in format::result_ids(message, format) {
            let output: String = texts
                .iter()
                .filter(|t| t.call_id.as_deref() == Some(id.as_str()))
                .filter_map(|t| message.pointer(&t.pointer)?.as_str())
                .collect::<Vec<_>>()
                .join("\n");
            let command = self.commands.get(&id).cloned().unwrap_or_default();
            self.flags_found.extend(flags(&output));
            let failed = labels.get(&id).copied().unwrap_or(false);
            let edits = ["edit", "create"].iter().any(|c| command.starts_with(c));
            if edits && let Some(file) = named_file(&output) {
                if failed {
                    self.failed_edits.insert(file);
                } else {
                    self.modified.insert(file);
                }
            }
            if failed {
                self.failures.push(Some((command, output)));
            } else if !command.is_empty() {
                for failure in &mut self.failures {
                    if failure.as_ref().is_some_and(|(c, _)| *c == command) {
                        *failure = None;
                    }
                }
            }
        }
    }

    fn last_unresolved(&self) -> Option<&(String, String)> {
        self.failures.iter().rev().find_map(Option::as_ref)
    }
}

/// Counts of one kind of check: (held, checked).
#[derive(Default, Clone, Copy)]
struct Share(usize, usize);

impl Share {
    fn add(&mut self, held: bool) {
        self.1 += 1;
        self.0 += usize::from(held);
    }

    fn cell(self) -> String {
        if self.1 == 0 {
            return "-".into();
        }
        format!("{}/{} {:.1}%", self.0, self.1, 100.0 * self.0 as f64 / self.1 as f64)
    }

    fn whole(self) -> bool {
        self.0 == self.1
    }
}

#[derive(Default)]
struct Report {
    compactions: usize,
    calls: usize,
    requests: Share,
    facts: Share,
    modified: Share,
    error: Share,
    newest: Share,
    found_values: Share,
    executed_in_progress: usize,
    executed_next: usize,
    resolved_blocked: usize,
    failed_modified: usize,
    template_constraints: usize,
    max_summary_tokens: u64,
    misses: Vec<String>,
}

/// Whether `text` (whitespace collapsed) holds `needle` (collapsed too).
fn holds(text: &str, needle: &str) -> bool {
    text.contains(&collapse_ws(needle))
}

fn strings(value: &Value, out: &mut String) {
    match value {
        Value::String(s) => {
            out.push_str(s);
            out.push('\n');
        }
        Value::Array(items) => items.iter().for_each(|v| strings(v, out)),
        Value::Object(map) => map.values().for_each(|v| strings(v, out)),
        _ => {}
    }
}

/// A path below its repository's root: `/repo/src/A.java` is also `src/A.java`.
fn path_forms(path: &str) -> [String; 2] {
    let below = path
        .trim_start_matches('/')
        .split_once('/')
        .map_or(path.to_owned(), |(_, rest)| rest.to_owned());
    [path.to_owned(), below]
}

fn probe(report: &mut Report, summary: &CompactSummary, kept: &[Value], truth: &Truth) {
    let mut text = summary_message_text(summary);
    text.push('\n');
    kept.iter().for_each(|m| strings(m, &mut text));
    let text = collapse_ws(&text);
    let mut miss = |what: String, held: bool| {
        if !held {
            report.misses.push(what);
        }
        held
    };
    for request in &truth.requests {
        let held = miss(format!("request {request:?}"), holds(&text, request));
        report.requests.add(held);
    }
    if let Some(newest) = truth.requests.last() {
        report.newest.add(holds(&text, newest));
    }
    for flag in &truth.flags_used {
        let held = miss(format!("found value {flag}"), text.contains(flag.as_str()));
        report.found_values.add(held);
    }
    for fact in &truth.facts {
        let held = miss(format!("fact {fact:?}"), holds(&text, fact));
        report.facts.add(held);
    }
    for file in &truth.modified {
        let held = path_forms(file).iter().any(|form| text.contains(form.as_str()));
        let held = miss(format!("modified {file}"), held);
        report.modified.add(held);
    }
    if let Some((command, output)) = truth.last_unresolved() {
        let held = output
            .lines()
            .map(str::trim)
            .filter(|l| l.chars().count() >= 8)
            .any(|l| text.contains(&collapse_ws(&l.chars().take(300).collect::<String>())));
        let held = miss(format!("unresolved error of `{command}`"), held);
        report.error.add(held);
    }
    let executed = |item: &str| {
        let head: String = collapse_ws(item).trim_end_matches('…').chars().take(60).collect();
        truth.assistant_texts.iter().any(|(_, t)| t.contains(&head))
    };
    report.executed_in_progress += summary.in_progress.iter().filter(|i| executed(i)).count();
    // A next step is done when a later call used what it names (a `code` span).
    let done_later = |item: &str| {
        let named: Vec<&str> = item.split('`').skip(1).step_by(2).filter(|n| n.len() >= 3).collect();
        let Some(said_at) = truth
            .assistant_texts
            .iter()
            .rev()
            .find(|(_, t)| t.contains(&collapse_ws(item).chars().take(40).collect::<String>()))
            .map(|(p, _)| *p)
        else {
            return false;
        };
        truth
            .call_texts
            .iter()
            .any(|(p, call)| *p > said_at && named.iter().any(|n| call.contains(n)))
    };
    report.executed_next += summary.next_steps.iter().filter(|i| done_later(i)).count();
    let failing: HashSet<&str> = truth.failures.iter().flatten().map(|(c, _)| c.as_str()).collect();
    report.resolved_blocked += summary
        .blocked
        .iter()
        .filter(|item| {
            let command = item.split('`').nth(1).unwrap_or("");
            !command.is_empty()
                && truth.commands.values().any(|c| c.starts_with(command))
                && !failing.iter().any(|c| c.starts_with(command))
        })
        .count();
    // A constraint that a demonstration or two requests hold is the framework's, not the user's.
    report.template_constraints += summary
        .constraints
        .iter()
        .filter(|c| {
            let c = collapse_ws(c.trim_end_matches('…'));
            let template = truth.demonstrations.iter().any(|d| d.contains(&c))
                || truth.request_texts.iter().filter(|r| r.contains(&c)).count() >= 2;
            if template {
                report.misses.push(format!("template constraint {c:?}"));
            }
            template
        })
        .count();
    report.failed_modified += summary
        .critical_context
        .files_modified
        .iter()
        .filter(|listed| {
            let only_failed = |set: &HashSet<String>| set.iter().any(|f| f.ends_with(listed.trim_start_matches("./")));
            only_failed(&truth.failed_edits) && !only_failed(&truth.modified)
        })
        .count();
}

/// Replays `chain` at `window`, compacting as the daemon does, and probes after every compaction.
fn replay(chain: &Chain, format: MessageFormat, window: u64, counter: &TokenCounter) -> Report {
    let mut config = Config::default();
    config.window.max_input_length = window;
    let mut report = Report::default();
    let mut truth = Truth::default();
    let mut kept: Vec<(usize, Value, u64)> = Vec::new();
    let mut summary: Option<CompactSummary> = None;
    let mut summary_tokens = 0;
    let mut archived_lines = 0;
    let budget = config.summary_budget_tokens();
    for (index, message) in chain.messages.iter().enumerate() {
        let before_reply = format::role_of(message) == Some("assistant");
        if before_reply && !kept.is_empty() {
            report.calls += 1;
            let total: u64 = summary_tokens + kept.iter().map(|(_, _, t)| t).sum::<u64>();
            if total >= config.compact_threshold_tokens() {
                let values: Vec<&Value> = kept.iter().map(|(_, m, _)| m).collect();
                let tokens: Vec<u64> = kept.iter().map(|(_, _, t)| *t).collect();
                if let Some(plan) = plan_split(&values, &tokens, format, TailBudget::of(&config)) {
                    let compacted: Vec<Value> = plan.compact.iter().map(|&i| kept[i].1.clone()).collect();
                    let after: Vec<Value> = plan.keep.iter().map(|&i| kept[i].1.clone()).collect();
                    let indices: Vec<usize> = plan.compact.iter().map(|&i| kept[i].0).collect();
                    let mut next = ExtractiveSummarizer
                        .summarize(&SummaryInput {
                            previous: summary.as_ref(),
                            indices: &indices,
                            kept: &after,
                            ..SummaryInput::new(&compacted, format, budget, counter)
                        })
                        .expect("the extractive summariser never fails");
                    let range = ArchiveRange {
                        file: "dialog/2026-11-28.jsonl".into(),
                        start_line: archived_lines + 1,
                        end_line: archived_lines + compacted.len(),
                        first_index: indices[0],
                        last_index: *indices.last().unwrap(),
                        messages: compacted.len(),
                    };
                    archived_lines += compacted.len();
                    next.add_archive_range(range, &indices);
                    summary_tokens =
                        crate::render::summary_message_tokens(&summary_message_text(&next), format, counter);
                    report.max_summary_tokens = report.max_summary_tokens.max(summary_tokens);
                    kept = plan.keep.iter().map(|&i| kept[i].clone()).collect();
                    report.compactions += 1;
                    let kept_values: Vec<Value> = kept.iter().map(|(_, m, _)| m.clone()).collect();
                    probe(&mut report, &next, &kept_values, &truth);
                    if std::env::var("SATCHEL_SHOW_SUMMARY").is_ok_and(|w| w == window.to_string()) {
                        eprintln!(
                            "=== {format:?} {window}, compaction {}\n{}",
                            report.compactions,
                            summary_message_text(&next)
                        );
                    }
                    summary = Some(next);
                }
            }
        }
        truth.take(index, message, format, &chain.labels);
        kept.push((index, message.clone(), counter.count_message(message)));
    }
    report
}

#[test]
fn the_work_memo_probe_on_shared_trajectories() {
    let dir = shared_data();
    if !dir.join("trajectories").is_dir() {
        eprintln!("SKIPPED: no shared data at {} (set SATCHEL_SHARED_DATA)", dir.display());
        return;
    }
    let labels = outcome_labels();
    let counter = TokenCounter::new(satchel_protocol::config::Tokenizer::Estimate, 4.0);
    eprintln!(
        "{:<10} {:>7} {:>5} {:>4} {:>19} {:>13} {:>17} {:>15} {:>15} {:>13} {:>5} {:>5} {:>5} {:>5} {:>5} {:>6}",
        "format",
        "window",
        "calls",
        "cmp",
        "requests",
        "facts",
        "modified",
        "last error",
        "newest",
        "found",
        "inpr",
        "next",
        "blkd",
        "fmod",
        "tmpl",
        "summ"
    );
    let mut reports = Vec::new();
    for (sub, format) in [
        ("trajectories", MessageFormat::Openai),
        ("trajectories_anthropic", MessageFormat::Anthropic),
    ] {
        let chain = chain(&dir.join(sub), format, &labels);
        for window in WINDOWS {
            let r = replay(&chain, format, window, &counter);
            eprintln!(
                "{:<10} {:>7} {:>5} {:>4} {:>19} {:>13} {:>17} {:>15} {:>15} {:>13} {:>5} {:>5} {:>5} {:>5} {:>5} {:>6}",
                format!("{format:?}").to_lowercase(),
                window,
                r.calls,
                r.compactions,
                r.requests.cell(),
                r.facts.cell(),
                r.modified.cell(),
                r.error.cell(),
                r.newest.cell(),
                r.found_values.cell(),
                r.executed_in_progress,
                r.executed_next,
                r.resolved_blocked,
                r.failed_modified,
                r.template_constraints,
                r.max_summary_tokens
            );
            if std::env::var_os("SATCHEL_SHOW_MISSES").is_some() {
                let unique: Vec<&String> = r.misses.iter().collect::<HashSet<_>>().into_iter().collect();
                eprintln!("  missed: {unique:?}");
            }
            reports.push(r);
        }
    }
    eprintln!(
        "(shares over (compaction, fact) checks; found: flags recovered from an output and submitted; inpr/next/blkd/fmod: executed steps in In Progress and Next Steps, resolved failures in Blocked, failed edits in Files modified; tmpl: constraints a demonstration or two requests hold; summ: largest summary message, tokens)"
    );
    for r in &reports {
        check_floor(r);
    }
}

/// What the memo already achieves, so that it cannot regress while the rest is built.
fn check_floor(r: &Report) {
    assert!(r.compactions > 0, "the probe lost its point: no compaction");
    assert!(r.requests.whole(), "the user's requests: {}", r.requests.cell());
    assert!(r.facts.whole(), "the user's constraint and fact: {}", r.facts.cell());
    assert!(r.error.whole(), "the last unresolved error: {}", r.error.cell());
    assert!(r.modified.whole(), "the files modified: {}", r.modified.cell());
    assert!(
        r.found_values.whole(),
        "the values found and used: {}",
        r.found_values.cell()
    );
    assert!(r.newest.whole(), "the newest request: {}", r.newest.cell());
    assert_eq!(r.failed_modified, 0, "a failed edit listed as modified");
    assert_eq!(r.executed_in_progress, 0, "an executed step listed as In Progress");
    assert_eq!(
        r.template_constraints, 0,
        "the framework's template taken for the user's constraints"
    );
}
