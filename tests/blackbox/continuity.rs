//! Continuity check of the summary: does what the user asked survive compaction?
//!
//! Builds one long session from every trajectory of `../shared/data/trajectories/` (OpenAI
//! format, sorted by file name): the first trajectory's system message is kept, every other
//! system message is dropped, every other message is kept in order, and each trajectory's tool
//! call ids are made unique by a prefix (`t03_` + id, in both `tool_calls[].id` and
//! `tool_call_id`). Two user facts are injected as user messages of their own:
//!
//! * [`CONSTRAINT`], early: right after the first assistant message of the first trajectory and
//!   its tool results (after some work has happened);
//! * [`FOLLOW_UP`], later: between trajectories, just before the first message of the middle
//!   trajectory of the chain (position `n / 2`).
//!
//! The facts tracked are those two, verbatim, and every user request of the chain: its *task
//! line* (the first non-empty line after a line `ISSUE:`, else its first non-empty line),
//! whitespace-collapsed and cut to its first [`TASK_LINE_CHARS`] chars. User messages starting
//! with "Here is a demonstration" are examples of how to work, not requests: they are only
//! counted.
//!
//! The session is replayed for each window of [`WINDOWS`] on a daemon and workspace of its own
//! (the three in parallel), with `config: {"max_input_length": window}` and every other key at
//! its default, the way an agent loop sends it: the first `context.prepare` sends `messages`
//! up to the first assistant message, each later one `append`s the next assistant message and
//! everything after it up to the following assistant message, so every call ends just before a
//! model reply. After every call, the facts whose message has left the session (its original
//! index is in the dialog archive) are looked up in the returned summary message (whitespace
//! collapsed on both sides); each (call, fact) lookup counts as one check of its kind
//! (requests, constraint, follow-up). Every call's `tokens.summary` is also compared with the
//! summary budget at that window (`summary_budget_tokens`, as `context.inspect` reports it),
//! and the calls reporting `over_limit` are counted.
//!
//! Every fact must have left the session (been compacted into the archive) and been checked
//! after that. When the chain is too short for that at a window (a fact still in the live tail
//! once the chain is sent; with the development data at every window), the chain is replayed a second time
//! in the same session, appended after the first pass: the same messages without any system
//! message and without the injected facts, ids prefixed again (`p2_t03_` + id). Its requests
//! are not tracked (they repeat the first pass's), but the checks of the first pass's facts go
//! on through it. The table's `passes` column says which windows needed it. The whole check
//! takes a few seconds in a debug build.
//!
//! The table goes to stderr and, as JSON, to `target/continuity.json` (or
//! `$SATCHEL_CONTINUITY_OUT`). Asserted, unless `SATCHEL_ASSERT_CONTINUITY=0` (which only
//! reports): every share is 100 % and no summary exceeded its budget. Always asserted, as they
//! are about the check itself: every fact left the session and was checked, and each kind was checked
//! at every window. `SATCHEL_SHOW_MISSES=1` prints each miss (window, call, fact) with the
//! summary's Goal and Constraints sections, once per run of consecutive calls that missed the
//! same facts with the same sections.
//!
//! The data is not part of the repository; without it the test prints why and passes.
//! `SATCHEL_SHARED_DATA` points at another copy.

use std::collections::{BTreeSet, HashSet};
use std::ops::Range;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::builders::user;
use crate::support::trajectories::{
    Format, Trajectory, check_pairing, content_texts, env_flag, load_shared_data, report_path, role,
};
use crate::support::{Daemon, SUMMARY_HEADING};

/// `max_input_length` of each replay.
const WINDOWS: [u64; 3] = [16_384, 65_536, 131_072];
/// The one session of each replay.
const SESSION: &str = "continuity";
/// Injected early.
const CONSTRAINT: &str = "Constraint for this whole session: never modify files under src/main/resources, and keep \
                          every public method signature unchanged.";
/// Injected before the middle trajectory.
const FOLLOW_UP: &str =
    "Follow-up request: when all tasks are done, write a file NOTES.md listing each fix in one line.";
/// How a demonstration (an example, not a request) starts.
const DEMONSTRATION: &str = "Here is a demonstration";
/// A request's task line is cut to this many chars.
const TASK_LINE_CHARS: usize = 100;
/// Runs of misses kept per window with their details (all misses are counted).
const MAX_MISSES: usize = 200;

// ---------------------------------------------------------------------------------------------
// The chain and its facts.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Request,
    Constraint,
    FollowUp,
}

impl Kind {
    const ALL: [Kind; 3] = [Kind::Request, Kind::Constraint, Kind::FollowUp];

    fn name(self) -> &'static str {
        match self {
            Kind::Request => "requests",
            Kind::Constraint => "constraint",
            Kind::FollowUp => "follow_up",
        }
    }
}

/// A fact to find in the summary once its message is compacted.
#[derive(Debug, Clone, PartialEq)]
struct Fact {
    kind: Kind,
    /// Original index of its message in the session.
    index: usize,
    /// What must be in the summary, whitespace-collapsed.
    text: String,
}

/// One pass over the trajectories, as the session receives it.
#[derive(Debug, Default)]
struct Chain {
    messages: Vec<Value>,
    /// Tracked in the first pass only.
    facts: Vec<Fact>,
    demonstrations: usize,
}

fn collapse(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The first non-empty line after a line `ISSUE:`, else the first non-empty line without
/// the sentences it opens with that another request of the chain (`others`) also opens its
/// first line with (a framework's template, such as "We're currently solving the following
/// CTF challenge.", is not the title); whitespace-collapsed and cut to [`TASK_LINE_CHARS`]
/// chars.
fn task_line(text: &str, others: &[String]) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let non_empty = |from: usize| lines[from..].iter().find(|l| !l.trim().is_empty()).copied();
    let issue = lines
        .iter()
        .position(|l| l.trim() == "ISSUE:")
        .and_then(|at| non_empty(at + 1));
    let mut line = collapse(issue.or_else(|| non_empty(0)).unwrap_or(""));
    if issue.is_none() {
        let first_lines: Vec<String> = others
            .iter()
            .map(|o| collapse(o.lines().find(|l| !l.trim().is_empty()).unwrap_or("")))
            .filter(|o| *o != line)
            .collect();
        while let Some(end) = line.find(". ").map(|i| i + 2) {
            if !first_lines.iter().any(|o| o.starts_with(&line[..end])) {
                break;
            }
            line = line[end..].to_owned();
        }
    }
    let cut: String = line.chars().take(TASK_LINE_CHARS).collect();
    cut.trim_end().to_owned()
}

/// `message` with its tool-call ids (OpenAI: `tool_calls[].id`, `tool_call_id`) prefixed.
fn prefix_ids(message: &Value, prefix: &str) -> Value {
    let mut message = message.clone();
    if let Some(calls) = message.get_mut("tool_calls").and_then(Value::as_array_mut) {
        for call in calls {
            if let Some(id) = call.get("id").and_then(Value::as_str) {
                call["id"] = json!(format!("{prefix}{id}"));
            }
        }
    }
    if let Some(id) = message.get("tool_call_id").and_then(Value::as_str) {
        message["tool_call_id"] = json!(format!("{prefix}{id}"));
    }
    message
}

/// Position in `messages` right after the first assistant message and its tool results.
fn after_first_turn(messages: &[Value]) -> Option<usize> {
    let assistant = messages.iter().position(|m| role(m) == "assistant")?;
    let results = messages[assistant + 1..]
        .iter()
        .take_while(|m| role(m) == "tool")
        .count();
    Some(assistant + 1 + results)
}

/// The trajectories chained. Pass 1 keeps the first system message, injects the two facts and
/// tracks the facts; pass 2 (`ids` prefixed `p2_` too) is only the trajectories' other messages.
fn chain(trajectories: &[Trajectory], pass: usize) -> Chain {
    assert!(
        trajectories.len() >= 2,
        "the continuity replay needs at least two trajectories, {} found",
        trajectories.len()
    );
    let first_pass = pass == 1;
    let follow_up_before = trajectories.len() / 2;
    let mut out = Chain::default();
    let requests: Vec<String> = trajectories
        .iter()
        .flat_map(|t| &t.messages)
        .filter(|m| role(m) == "user")
        .map(|m| content_texts(m.get("content")))
        .filter(|text| !text.trim_start().starts_with(DEMONSTRATION))
        .collect();
    let push_fact = |out: &mut Chain, kind: Kind, text: String| {
        out.facts.push(Fact {
            kind,
            index: out.messages.len(),
            text,
        });
    };
    for (position, t) in trajectories.iter().enumerate() {
        assert_eq!(
            t.format,
            Format::Openai,
            "{}: the chain is built from OpenAI-format trajectories",
            t.name
        );
        let prefix = if first_pass {
            format!("t{position:02}_")
        } else {
            format!("p{pass}_t{position:02}_")
        };
        let constraint_at = (first_pass && position == 0)
            .then(|| after_first_turn(&t.messages).unwrap_or_else(|| panic!("{}: no assistant message", t.name)));
        if first_pass && position == follow_up_before {
            push_fact(&mut out, Kind::FollowUp, FOLLOW_UP.to_owned());
            out.messages.push(user(FOLLOW_UP));
        }
        for (k, message) in t.messages.iter().enumerate() {
            if constraint_at == Some(k) {
                push_fact(&mut out, Kind::Constraint, CONSTRAINT.to_owned());
                out.messages.push(user(CONSTRAINT));
            }
            if role(message) == "system" && !(first_pass && position == 0 && out.messages.is_empty()) {
                continue;
            }
            if role(message) == "user" && first_pass {
                let text = content_texts(message.get("content"));
                if text.trim_start().starts_with(DEMONSTRATION) {
                    out.demonstrations += 1;
                } else {
                    let line = task_line(&text, &requests);
                    if !line.is_empty() {
                        push_fact(&mut out, Kind::Request, line);
                    }
                }
            }
            out.messages.push(prefix_ids(message, &prefix));
        }
        if constraint_at == Some(t.messages.len()) {
            push_fact(&mut out, Kind::Constraint, CONSTRAINT.to_owned());
            out.messages.push(user(CONSTRAINT));
        }
    }
    out
}

/// What each `context.prepare` of an agent loop sends: up to the first assistant message, then
/// from each assistant message up to the next one.
fn calls(messages: &[Value]) -> Vec<Range<usize>> {
    let mut starts: Vec<usize> = vec![0];
    starts.extend((1..messages.len()).filter(|&i| role(&messages[i]) == "assistant"));
    starts.push(messages.len());
    starts.dedup();
    starts.windows(2).map(|w| w[0]..w[1]).collect()
}

// ---------------------------------------------------------------------------------------------
// The summary.

/// The summary message's text: the first message after the leading system messages, when it
/// starts with [`SUMMARY_HEADING`] (stricter than [`checks::summary_text`], which finds the
/// heading anywhere).
///
/// [`checks::summary_text`]: crate::support::checks::summary_text
fn leading_summary_text(returned: &[Value]) -> Option<String> {
    let first = returned.iter().find(|m| role(m) != "system")?;
    let text = content_texts(first.get("content"));
    text.starts_with(SUMMARY_HEADING).then_some(text)
}

/// The lines of a `## ` section, heading included, up to the next `## ` heading.
fn section(summary: &str, heading: &str) -> String {
    let mut lines = summary.lines().skip_while(|l| !l.starts_with(heading));
    let Some(first) = lines.next() else {
        return format!("({heading} not found)");
    };
    std::iter::once(first)
        .chain(lines.take_while(|l| !l.starts_with("## ")))
        .collect::<Vec<_>>()
        .join("\n")
}

// ---------------------------------------------------------------------------------------------
// Replay.

#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    present: usize,
    checked: usize,
}

impl Tally {
    fn add(&mut self, present: bool) {
        self.checked += 1;
        self.present += usize::from(present);
    }

    fn pct(self) -> f64 {
        if self.checked == 0 {
            100.0
        } else {
            100.0 * self.present as f64 / self.checked as f64
        }
    }

    fn cell(self) -> String {
        format!("{}/{} {:5.1}%", self.present, self.checked, self.pct())
    }

    fn json(self) -> Value {
        json!({"present": self.present, "checked": self.checked, "pct": (self.pct() * 10.0).round() / 10.0})
    }
}

/// What one window's replay gave.
#[derive(Debug, Default)]
struct Report {
    window: u64,
    /// The summary budget at this window (0 until the first call, which makes the session).
    budget: u64,
    passes: usize,
    messages: usize,
    calls: usize,
    compactions: usize,
    /// Per [`Kind::ALL`].
    tallies: [Tally; 3],
    /// Facts (by position in the chain's list) checked at least once / missed at least once.
    facts_checked: BTreeSet<usize>,
    facts_missed: BTreeSet<usize>,
    /// Facts no compaction came after.
    uncovered: Vec<usize>,
    max_summary_tokens: u64,
    /// Calls whose `tokens.summary` exceeded the budget, and the first of them.
    over_budget: usize,
    over_budget_samples: Vec<String>,
    over_limit: usize,
    /// The first calls' `over_limit` texts.
    over_limit_reasons: Vec<String>,
    prepare_time: Duration,
    elapsed: Duration,
    /// Runs of calls with the same misses and the same Goal and Constraints sections.
    misses: Vec<Miss>,
}

/// Consecutive calls that missed the same facts with the same Goal and Constraints sections.
#[derive(Debug)]
struct Miss {
    first_call: usize,
    last_call: usize,
    /// The facts missed, then the sections.
    details: String,
}

impl Report {
    fn tally(&self, kind: Kind) -> Tally {
        self.tallies[kind as usize]
    }

    fn json(&self, facts: &[Fact]) -> Value {
        let mut shares = serde_json::Map::new();
        for kind in Kind::ALL {
            shares.insert(kind.name().into(), self.tally(kind).json());
        }
        let missed: Vec<Value> = self
            .facts_missed
            .iter()
            .map(|&f| json!({"kind": facts[f].kind.name(), "index": facts[f].index, "text": facts[f].text}))
            .collect();
        json!({
            "max_input_length": self.window,
            "passes": self.passes,
            "messages": self.messages,
            "calls": self.calls,
            "compactions": self.compactions,
            "shares": shares,
            "facts": facts.len(),
            "facts_checked": self.facts_checked.len(),
            "facts_missed_at_least_once": missed,
            "facts_without_a_later_compaction": self.uncovered.len(),
            "summary_tokens": {
                "max": self.max_summary_tokens,
                "budget": self.budget,
                "calls_over_budget": self.over_budget,
            },
            "over_limit_calls": self.over_limit,
            "over_limit_reasons": self.over_limit_reasons,
            "seconds": (self.elapsed.as_secs_f64() * 10.0).round() / 10.0,
            "prepare_seconds": (self.prepare_time.as_secs_f64() * 10.0).round() / 10.0,
        })
    }
}

/// One window's replay: a daemon on a workspace of its own, one session.
struct Replay<'a> {
    daemon: Daemon,
    workspace: &'a Path,
    facts: &'a [Fact],
    report: Report,
    /// Messages of the session so far.
    sent: usize,
    /// Original indices archived so far.
    archived: HashSet<usize>,
    show_misses: bool,
}

impl Replay<'_> {
    fn pass(&mut self, messages: &[Value]) {
        self.report.passes += 1;
        self.report.messages += messages.len();
        for range in calls(messages) {
            self.call(&messages[range]);
        }
    }

    fn call(&mut self, segment: &[Value]) {
        let call = self.report.calls + 1;
        let window = self.report.window;
        let mut params = json!({"session_id": SESSION, "config": {"max_input_length": window}});
        params[if self.sent == 0 { "messages" } else { "append" }] = json!(segment);
        let started = Instant::now();
        let result = self.daemon.call("context.prepare", params);
        self.report.prepare_time += started.elapsed();
        self.report.calls = call;
        self.sent += segment.len();
        assert_eq!(
            result.pointer("/reconciliation/session_messages"),
            Some(&json!(self.sent)),
            "window {window}, call {call}: the session does not hold the messages sent: {}",
            result["reconciliation"]
        );

        if self.report.budget == 0 {
            let shown = self.daemon.call("context.inspect", json!({"session_id": SESSION}));
            self.report.budget = shown["summary_budget_tokens"]
                .as_u64()
                .unwrap_or_else(|| panic!("inspect reports no summary_budget_tokens: {shown}"));
        }
        let summary_tokens = result.pointer("/tokens/summary").and_then(Value::as_u64).unwrap_or(0);
        self.report.max_summary_tokens = self.report.max_summary_tokens.max(summary_tokens);
        if summary_tokens > self.report.budget {
            self.report.over_budget += 1;
            if self.report.over_budget_samples.len() < 10 {
                self.report
                    .over_budget_samples
                    .push(format!("window {window}, call {call}: tokens {}", result["tokens"]));
            }
        }
        if let Some(over) = result.get("over_limit").filter(|o| !o.is_null()) {
            self.report.over_limit += 1;
            if self.report.over_limit_reasons.len() < 5 {
                let reason = over.as_str().map_or_else(|| over.to_string(), str::to_owned);
                self.report.over_limit_reasons.push(format!("call {call}: {reason}"));
            }
        }

        let compactions = result["actions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|a| a["kind"] == "compacted")
            .count();
        if compactions > 0 {
            self.report.compactions += compactions;
            self.archived = crate::support::archived(self.workspace, SESSION).into_keys().collect();
        }
        if self.archived.is_empty() {
            return;
        }

        let returned = result["messages"].as_array().map(Vec::as_slice).unwrap_or_default();
        let summary = leading_summary_text(returned);
        let collapsed = collapse(summary.as_deref().unwrap_or(""));
        let mut missed = Vec::new();
        for (f, fact) in self.facts.iter().enumerate() {
            if !self.archived.contains(&fact.index) {
                continue;
            }
            let present = collapsed.contains(&fact.text);
            self.report.tallies[fact.kind as usize].add(present);
            self.report.facts_checked.insert(f);
            if !present {
                self.report.facts_missed.insert(f);
                missed.push(fact);
            }
        }
        if missed.is_empty() {
            return;
        }
        if !self.show_misses {
            return;
        }
        let mut details = String::new();
        for fact in missed {
            details.push_str(&format!(
                "\n  missing {} (message {}): {}",
                fact.kind.name(),
                fact.index,
                fact.text
            ));
        }
        match &summary {
            Some(s) => {
                for heading in ["## Goal", "## Constraints"] {
                    details.push_str("\n  | ");
                    details.push_str(&section(s, heading).replace('\n', "\n  | "));
                }
            }
            None => details.push_str("\n  (no summary message in the request)"),
        }
        if let Some(last) = self.report.misses.last_mut()
            && last.last_call + 1 == call
            && last.details == details
        {
            last.last_call = call;
        } else if self.report.misses.len() < MAX_MISSES {
            self.report.misses.push(Miss {
                first_call: call,
                last_call: call,
                details,
            });
        }
    }
}

fn replay_window(window: u64, first: &Chain, second: &Chain, show_misses: bool) -> Report {
    let started = Instant::now();
    let workspace = tempfile::tempdir().expect("temp workspace");
    let mut daemon = Daemon::start(workspace.path(), &[]);
    daemon.call("initialize", json!({}));
    let mut replay = Replay {
        daemon,
        workspace: workspace.path(),
        facts: &first.facts,
        report: Report {
            window,
            ..Report::default()
        },
        sent: 0,
        archived: HashSet::new(),
        show_misses,
    };
    replay.pass(&first.messages);
    // A fact is checked once its message has left the session: when one is still live after
    // the chain, replay it once more (asserted below: every fact left).
    if first.facts.iter().any(|f| !replay.archived.contains(&f.index)) {
        replay.pass(&second.messages);
    }
    let mut report = replay.report;
    report.uncovered = (0..first.facts.len())
        .filter(|&f| !replay.archived.contains(&first.facts[f].index))
        .collect();
    replay.daemon.shutdown();
    report.elapsed = started.elapsed();
    report
}

#[test]
fn requests_and_constraints_survive_compaction() {
    let started = Instant::now();
    let Some((dir, [(folder, trajectories), _])) = load_shared_data() else {
        return;
    };
    if trajectories.is_empty() {
        eprintln!("SKIPPED: no {folder}/*.json in {}", dir.display());
        return;
    }
    let show_misses = env_flag("SATCHEL_SHOW_MISSES");
    let first = chain(&trajectories, 1);
    let second = chain(&trajectories, 2);
    for pass in [&first, &second] {
        check_pairing(&pass.messages, Format::Openai).unwrap_or_else(|e| panic!("the chain itself: {e}"));
    }
    let count = |kind: Kind| first.facts.iter().filter(|f| f.kind == kind).count();

    let reports: Vec<Report> = std::thread::scope(|scope| {
        let handles: Vec<_> = WINDOWS
            .iter()
            .map(|&window| {
                let (first, second) = (&first, &second);
                scope.spawn(move || replay_window(window, first, second, show_misses))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("replay job panicked"))
            .collect()
    });

    eprintln!(
        "\ncontinuity replay: {} trajectories of {folder}/ chained into {} messages ({} requests, {} demonstrations \
         not tracked, constraint at {}, follow-up at {}); shares are present/checked over (call, compacted fact)",
        trajectories.len(),
        first.messages.len(),
        count(Kind::Request),
        first.demonstrations,
        first
            .facts
            .iter()
            .find(|f| f.kind == Kind::Constraint)
            .map_or(0, |f| f.index),
        first
            .facts
            .iter()
            .find(|f| f.kind == Kind::FollowUp)
            .map_or(0, |f| f.index),
    );
    eprintln!(
        "{:>7} {:>6} {:>5} {:>4} {:>18} {:>16} {:>16} {:>9} {:>13} {:>6} {:>7}",
        "window",
        "passes",
        "calls",
        "cmp",
        "requests",
        "constraint",
        "follow_up",
        "facts",
        "max sum/budg",
        "over",
        "time"
    );
    for r in &reports {
        eprintln!(
            "{:>7} {:>6} {:>5} {:>4} {:>18} {:>16} {:>16} {:>9} {:>13} {:>6} {:>6.1}s",
            r.window,
            r.passes,
            r.calls,
            r.compactions,
            r.tally(Kind::Request).cell(),
            r.tally(Kind::Constraint).cell(),
            r.tally(Kind::FollowUp).cell(),
            format!("{}/{}", r.facts_checked.len(), first.facts.len()),
            format!("{}/{}", r.max_summary_tokens, r.budget),
            r.over_limit,
            r.elapsed.as_secs_f64()
        );
    }
    eprintln!(
        "(facts = facts checked at least once / tracked; over = calls reporting over_limit; time per window, \
         in parallel; total {:.1?})",
        started.elapsed()
    );
    for r in &reports {
        let missed: Vec<String> = r
            .facts_missed
            .iter()
            .map(|&f| format!("{} {}", first.facts[f].kind.name(), first.facts[f].index))
            .collect();
        if !missed.is_empty() {
            eprintln!("  window {}: missed at least once: {}", r.window, missed.join(", "));
        }
        if !r.over_limit_reasons.is_empty() {
            eprintln!("  window {}: over_limit reasons: {:?}", r.window, r.over_limit_reasons);
        }
        for sample in &r.over_budget_samples {
            eprintln!("  summary over budget: {sample}");
        }
    }
    if show_misses {
        for r in &reports {
            for miss in &r.misses {
                eprintln!(
                    "window {}, calls {}-{}:{}",
                    r.window, miss.first_call, miss.last_call, miss.details
                );
            }
        }
    }

    let out = report_path("SATCHEL_CONTINUITY_OUT", "continuity.json");
    let doc = json!({
        "data": dir.display().to_string(),
        "chain": {
            "trajectories": trajectories.len(),
            "messages": first.messages.len(),
            "requests": count(Kind::Request),
            "demonstrations": first.demonstrations,
            "facts": first.facts.iter().map(|f| json!({"kind": f.kind.name(), "index": f.index, "text": f.text})).collect::<Vec<_>>(),
        },
        "windows": reports.iter().map(|r| r.json(&first.facts)).collect::<Vec<_>>(),
        "seconds": (started.elapsed().as_secs_f64() * 10.0).round() / 10.0,
    });
    if let Some(parent) = out.parent() {
        let _ = std::fs::create_dir_all(parent);
    }
    match std::fs::write(&out, serde_json::to_string_pretty(&doc).unwrap() + "\n") {
        Ok(()) => eprintln!("continuity numbers written to {}", out.display()),
        Err(e) => eprintln!("could not write {}: {e}", out.display()),
    }

    // About the check itself: every fact was exercised.
    for r in &reports {
        assert!(
            r.uncovered.is_empty(),
            "window {}: {} facts never left the session (the first at message {}): the chain is too short",
            r.window,
            r.uncovered.len(),
            first.facts[r.uncovered[0]].index
        );
        assert_eq!(
            r.facts_checked.len(),
            first.facts.len(),
            "window {}: every fact is checked after it left the session",
            r.window
        );
        for kind in Kind::ALL {
            assert!(
                r.tally(kind).checked > 0,
                "window {}: no {} fact was ever compacted, so none was checked",
                r.window,
                kind.name()
            );
        }
    }

    if std::env::var("SATCHEL_ASSERT_CONTINUITY").as_deref() != Ok("0") {
        let mut failures = Vec::new();
        for r in &reports {
            for kind in Kind::ALL {
                let tally = r.tally(kind);
                if tally.present < tally.checked {
                    failures.push(format!(
                        "window {}: {} {}/{} ({:.1} %)",
                        r.window,
                        kind.name(),
                        tally.present,
                        tally.checked,
                        tally.pct()
                    ));
                }
            }
            if r.over_budget > 0 {
                failures.push(format!(
                    "window {}: tokens.summary above its budget {} in {} calls (max {})",
                    r.window, r.budget, r.over_budget, r.max_summary_tokens
                ));
            }
        }
        assert!(
            failures.is_empty(),
            "continuity targets missed (SATCHEL_SHOW_MISSES=1 lists each miss): {}",
            failures.join("; ")
        );
    }
}

/// Issue 30's long sessions at 131,072: 12 and 20 chained runs (the 20 repeat the first six
/// trajectories after the fourteen), every request's title, the constraint and the follow-up
/// in every summary after they left the session.
#[test]
fn long_chains_at_131k_keep_every_title_constraint_and_follow_up() {
    let Some((_, [(_, trajectories), _])) = load_shared_data() else {
        return;
    };
    if trajectories.len() < 12 {
        eprintln!(
            "SKIPPED: the long chains need 12 trajectories, {} found",
            trajectories.len()
        );
        return;
    }
    let twenty: Vec<Trajectory> = trajectories
        .iter()
        .chain(trajectories.iter())
        .take(20)
        .cloned()
        .collect();
    let runs: [&[Trajectory]; 2] = [&trajectories[..12], &twenty];
    let reports: Vec<(usize, Report)> = std::thread::scope(|scope| {
        let handles: Vec<_> = runs
            .iter()
            .map(|runs| {
                scope.spawn(move || {
                    let (first, second) = (chain(runs, 1), chain(runs, 2));
                    (runs.len(), replay_window(131_072, &first, &second, false))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("replay job panicked"))
            .collect()
    });
    for (runs, r) in &reports {
        let cells: Vec<String> = Kind::ALL
            .iter()
            .map(|&kind| format!("{} {}", kind.name(), r.tally(kind).cell()))
            .collect();
        eprintln!(
            "{runs} runs at 131072: {} calls, {} compactions, {}; summary at most {}/{} tokens",
            r.calls,
            r.compactions,
            cells.join(", "),
            r.max_summary_tokens,
            r.budget
        );
        assert!(r.uncovered.is_empty(), "{runs} runs: a fact never left the session");
        for kind in Kind::ALL {
            let tally = r.tally(kind);
            assert!(tally.checked > 0, "{runs} runs: no {} checked", kind.name());
            assert_eq!(tally.present, tally.checked, "{runs} runs: {}", kind.name());
        }
        assert_eq!(r.over_budget, 0, "{runs} runs: a summary over its budget");
    }
}

/// The chain and its facts on synthetic trajectories, so a wrong builder cannot pass silently.
#[test]
fn the_chain_and_its_facts_are_built_as_described() {
    assert_eq!(
        task_line("We're solving this.\nISSUE:\n  Fix   the\tparser  \nmore", &[]),
        "Fix the parser"
    );
    assert_eq!(task_line("\n\n  first  line \nsecond", &[]), "first line");
    assert_eq!(task_line(&"é ".repeat(80), &[]).chars().count(), TASK_LINE_CHARS - 1);
    assert_eq!(task_line("ISSUE:\n\n\nlate", &[]), "late");
    let ctf = |name: &str| format!("We're solving a CTF challenge. It is named {name}. Good luck.\nmore");
    assert_eq!(
        task_line(&ctf("eps"), &[ctf("eps"), ctf("pwn")]),
        "It is named eps. Good luck."
    );

    let trajectory = |name: &str, request: &str| Trajectory {
        name: name.into(),
        session_id: name.into(),
        format: Format::Openai,
        system: None,
        messages: vec![
            json!({"role": "system", "content": format!("system of {name}")}),
            json!({"role": "user", "content": "Here is a demonstration of how to work.\nISSUE:\nnot a task"}),
            json!({"role": "user", "content": format!("Intro\nISSUE:\n{request}\n")}),
            json!({"role": "assistant", "content": "look", "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]}),
            json!({"role": "tool", "tool_call_id": "c1", "content": "out"}),
            json!({"role": "assistant", "content": "done"}),
        ],
    };
    let trajectories = vec![
        trajectory("a", "task A"),
        trajectory("b", "task B"),
        trajectory("c", "task C"),
    ];
    let first = chain(&trajectories, 1);
    let roles: Vec<&str> = first.messages.iter().map(role).collect();
    assert_eq!(
        roles,
        [
            "system",
            "user",
            "user",
            "assistant",
            "tool",
            "user", // the constraint
            "assistant",
            "user", // the follow-up, before trajectory 1 of 3
            "user",
            "user",
            "assistant",
            "tool",
            "assistant",
            "user",
            "user",
            "assistant",
            "tool",
            "assistant",
        ]
    );
    assert_eq!(first.messages[0]["content"], "system of a");
    assert_eq!(first.messages[5]["content"], CONSTRAINT);
    assert_eq!(first.messages[7]["content"], FOLLOW_UP);
    assert_eq!(first.messages[10]["tool_calls"][0]["id"], "t01_c1");
    assert_eq!(first.messages[11]["tool_call_id"], "t01_c1");
    assert_eq!(first.demonstrations, 3);
    let facts: Vec<(Kind, usize, &str)> = first.facts.iter().map(|f| (f.kind, f.index, f.text.as_str())).collect();
    assert_eq!(
        facts,
        [
            (Kind::Request, 2, "task A"),
            (Kind::Constraint, 5, CONSTRAINT),
            (Kind::FollowUp, 7, FOLLOW_UP),
            (Kind::Request, 9, "task B"),
            (Kind::Request, 14, "task C"),
        ]
    );
    assert_eq!(check_pairing(&first.messages, Format::Openai), Ok(()));

    let second = chain(&trajectories, 2);
    assert_eq!(second.messages.len(), 15, "no system message, nothing injected");
    assert!(second.facts.is_empty());
    assert_eq!(second.messages[2]["tool_calls"][0]["id"], "p2_t00_c1");

    // Every call but the first starts with an assistant message and ends before the next one.
    assert_eq!(
        calls(&first.messages),
        [0..3, 3..6, 6..10, 10..12, 12..15, 15..17, 17..18]
    );
    assert_eq!(calls(&second.messages)[0], 0..2);

    let summary = format!(
        "{SUMMARY_HEADING}\n\nintro\n\n## Goal\n\n- task A\n\n## Constraints & Preferences\n\n- keep it\n\n## Progress\n"
    );
    let returned = [
        json!({"role": "system", "content": "s"}),
        json!({"role": "user", "content": summary}),
    ];
    assert_eq!(leading_summary_text(&returned).as_deref(), Some(summary.as_str()));
    assert_eq!(leading_summary_text(&returned[..1]), None);
    assert_eq!(section(&summary, "## Goal"), "## Goal\n\n- task A\n");
    assert_eq!(
        section(&summary, "## Constraints"),
        "## Constraints & Preferences\n\n- keep it\n"
    );
}
