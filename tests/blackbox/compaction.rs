//! Black-box tests of compaction: each one spawns the real `satchel serve` on a fresh temporary
//! workspace with a small context window, drives an agent loop over JSON-RPC on stdio, and checks
//! what a user of the agent relies on: the request fits, tool calls stay paired, the newest user
//! message and the system prompt stay, the summary carries the past, and nothing is ever lost —
//! every compacted message is in the dialog archive byte for byte, even across `kill -9`.

use std::collections::{BTreeSet, VecDeque};
use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::builders::{
    AgentLoop, FIRST_COMMAND, FIRST_FILE, SYSTEM, agent_step, assistant, call_message, developer, result_message,
    system, tool_output, user,
};
use crate::support::checks::{
    self, assert_log_has_no_pending_compaction, error_code, n, pretty, same_modulo_summary, summary_text,
};
use crate::support::trajectories::{Format, blocks, check_request_shape, result_ids, role};
use crate::support::{Daemon, SUMMARY_HEADING, actions, archive_lines, archived};

const WINDOW: u64 = 4096;
const SUMMARY_BUDGET: u64 = 600;
/// The small window, set for the whole daemon.
const SMALL_WINDOW: [(&str, &str); 2] = [
    ("SATCHEL_MAX_INPUT_LENGTH", "4096"),
    ("SATCHEL_SUMMARY_MAX_TOKENS", "600"),
];
/// A tool result longer than this is offloaded to a file (old-phase limit + slack, defaults).
const OFFLOAD_ABOVE: usize = 3_100;

const TASK: &str =
    "Fix the failing build of the parser crate. The public API must not change, and keep the MSRV at 1.70.";

// ---------------------------------------------------------------------------------------------
// Conversation builders
// ---------------------------------------------------------------------------------------------

fn tool_definitions(fmt: Format) -> Value {
    let schema = json!({"type": "object", "properties": {"command": {"type": "string"}, "path": {"type": "string"}}});
    match fmt {
        Format::Openai => json!([
            {"type": "function", "function": {"name": "bash", "description": "Run a shell command.", "parameters": schema}},
            {"type": "function", "function": {"name": "edit_file", "description": "Patch a file.", "parameters": schema}},
        ]),
        Format::Anthropic => json!([
            {"name": "bash", "description": "Run a shell command.", "input_schema": schema},
            {"name": "edit_file", "description": "Patch a file.", "input_schema": schema},
        ]),
        Format::OpenaiResponses => json!([
            {"type": "function", "name": "bash", "description": "Run a shell command.", "parameters": schema},
            {"type": "function", "name": "edit_file", "description": "Patch a file.", "parameters": schema},
        ]),
    }
}

/// The agent loop of these tests: outputs of 2–5 KB, two of them offloaded.
const AGENT_LOOP: AgentLoop = AgentLoop {
    check_bytes: 2_400,
    test_bytes: 5_000,
    runs_tests: |s| matches!(s, 2 | 8),
    reply: |s| format!("Module {s} builds now. I'll move on because the parser still fails in the next module."),
};

// ---------------------------------------------------------------------------------------------
// Checking requests
// ---------------------------------------------------------------------------------------------

/// A user message that is not (only) tool results.
fn is_user_turn(fmt: Format, m: &Value) -> bool {
    role(m) == "user" && result_ids(m, fmt).is_empty()
}

/// The pressure level `context.inspect` must report for `tokens`: under half the window low,
/// under the compaction threshold in force medium, under the limit high, else critical.
fn expected_pressure(tokens: &Value) -> &'static str {
    let (total, threshold, limit) = (n(&tokens["total"]), n(&tokens["threshold"]), n(&tokens["limit"]));
    if total * 2 < limit {
        "low"
    } else if total < threshold {
        "medium"
    } else if total < limit {
        "high"
    } else {
        "critical"
    }
}

/// Zones add up: `system + tools + summary + compactable + reserved == total`.
fn check_zones(tokens: &Value) {
    let zone = |k: &str| n(&tokens[k]);
    assert_eq!(zone("compactable") + zone("reserved"), zone("messages"), "{tokens}");
    assert_eq!(
        zone("system") + zone("tools") + zone("summary") + zone("compactable") + zone("reserved"),
        zone("total"),
        "{tokens}"
    );
}

/// What every returned request must satisfy, given the history `sent` it answers.
fn check_request(fmt: Format, sent: &[Value], result: &Value) {
    let messages = result["messages"].as_array().unwrap();
    let dump = || pretty(messages);
    check_request_shape(messages, fmt).unwrap_or_else(|e| panic!("not a valid request: {e}\n{}", dump()));
    let tokens = &result["tokens"];
    check_zones(tokens);
    let (total, limit) = (n(&tokens["total"]), n(&tokens["limit"]));
    if total > limit {
        let why = result["over_limit"]
            .as_str()
            .unwrap_or_else(|| panic!("{total} > {limit} tokens, unexplained"));
        assert!(
            why.contains(&limit.to_string()),
            "over_limit does not state the limit: {why}"
        );
    } else {
        assert!(
            result.get("over_limit").is_none(),
            "over_limit set at {total} ≤ {limit}"
        );
    }

    let summary = summary_text(result);
    assert_eq!(
        summary.is_some(),
        result.get("compact_summary").is_some(),
        "the summary message is there exactly when compact_summary is"
    );
    let with_heading = messages
        .iter()
        .filter(|m| m.to_string().contains(SUMMARY_HEADING))
        .count();
    assert!(
        with_heading <= 1,
        "the summary appears {with_heading} times\n{}",
        dump()
    );
    match fmt {
        Format::Openai => {
            if let Some(system) = sent.first().filter(|m| role(m) == "system") {
                assert_eq!(&messages[0], system, "the system message stays first");
            }
            if summary.is_some() {
                let at = messages.iter().take_while(|m| role(m) == "system").count();
                let m = &messages[at];
                assert!(
                    role(m) == "user" && m["content"].as_str().is_some_and(|s| s.starts_with(SUMMARY_HEADING)),
                    "the summary is not the user message right after the system messages\n{}",
                    dump()
                );
            }
        }
        Format::OpenaiResponses => {
            let leading = |m: &&Value| matches!(role(m), "system" | "developer");
            let instructions = sent.iter().take_while(leading).count();
            assert_eq!(
                messages[..instructions],
                sent[..instructions],
                "the developer messages stay first"
            );
            if summary.is_some() {
                let m = &messages[instructions];
                assert!(
                    m["type"] == "message"
                        && role(m) == "user"
                        && m["content"][0]["type"] == "input_text"
                        && m["content"][0]["text"]
                            .as_str()
                            .is_some_and(|s| s.starts_with(SUMMARY_HEADING)),
                    "the summary is not the user message item right after the developer messages\n{}",
                    dump()
                );
            }
        }
        Format::Anthropic => {
            if summary.is_some() {
                assert!(
                    blocks(&messages[0])
                        .next()
                        .is_some_and(|b| b["type"] == "text" && b["text"].as_str().unwrap().contains(SUMMARY_HEADING)),
                    "the first user message does not start with the summary\n{}",
                    dump()
                );
            }
        }
    }
    if let Some(newest) = sent.iter().rev().find(|m| is_user_turn(fmt, m)) {
        assert!(
            messages.iter().any(|m| same_modulo_summary(m, newest)),
            "the newest user message {newest} is not in the request verbatim\n{}",
            dump()
        );
    }
    let last = sent.last().unwrap();
    assert!(
        same_modulo_summary(messages.last().unwrap(), last),
        "the newest message is not last and whole"
    );
}

/// The checks of a compaction report: something was compacted into a real archive range.
fn check_report(report: &Value, manual: bool) {
    assert_eq!(report["manual"], manual, "{report}");
    let messages = n(&report["messages"]);
    assert!(messages > 0, "{report}");
    let range = &report["archive"];
    let file = range["file"]
        .as_str()
        .unwrap_or_else(|| panic!("no archive range: {report}"));
    assert!(file.starts_with("dialog/") && file.ends_with(".jsonl"), "{file}");
    assert_eq!(n(&range["messages"]), messages, "{report}");
    assert_eq!(
        n(&range["end_line"]) + 1 - n(&range["start_line"]),
        messages,
        "{report}"
    );
    assert!(n(&range["first_index"]) <= n(&range["last_index"]), "{report}");
    assert!(n(&report["tokens_after"]) < n(&report["tokens_before"]), "{report}");
}

// ---------------------------------------------------------------------------------------------
// The agent
// ---------------------------------------------------------------------------------------------

/// An agent loop talking to one daemon: sends its history one message at a time, checks every
/// request it gets back, and remembers every compaction.
struct Agent {
    dir: tempfile::TempDir,
    daemon: Option<Daemon>,
    fmt: Format,
    session: String,
    /// Per-request config overrides (the small window), or `None` when the daemon's env sets it.
    overrides: Option<Value>,
    /// Everything sent, by original index.
    sent: Vec<Value>,
    /// The last prepare result.
    last: Value,
    /// Every compaction reported, in order.
    reports: Vec<Value>,
    /// Messages of the current step not sent yet.
    queue: VecDeque<Value>,
    next_step: usize,
}

impl Agent {
    /// A session holding the system prompt and the task, on a daemon with the small window set
    /// per request (`per_request`) or through `SATCHEL_` environment variables.
    fn start(fmt: Format, per_request: bool) -> Agent {
        let dir = tempfile::tempdir().unwrap();
        let mut agent = Agent {
            daemon: None,
            dir,
            fmt,
            session: format!("agent-{fmt:?}").to_lowercase(),
            overrides: per_request.then(|| json!({"max_input_length": WINDOW, "summary_max_tokens": SUMMARY_BUDGET})),
            sent: Vec::new(),
            last: Value::Null,
            reports: Vec::new(),
            queue: VecDeque::new(),
            next_step: 0,
        };
        agent.restart(|_| {});
        let initial = match fmt {
            Format::Openai => vec![system(SYSTEM), user(TASK)],
            Format::Anthropic => vec![user(TASK)],
            Format::OpenaiResponses => vec![developer(SYSTEM), user(TASK)],
        };
        agent.sent = initial.clone();
        let result = agent.prepare("messages", &initial);
        assert_eq!(n(&result["tokens"]["limit"]), WINDOW);
        agent.accept(result);
        agent
    }

    fn d(&mut self) -> &mut Daemon {
        self.daemon.as_mut().expect("daemon running")
    }

    /// Stops the daemon cleanly, lets `edit` change the workspace, and starts a new one.
    fn restart(&mut self, edit: impl FnOnce(&Path)) {
        if let Some(d) = self.daemon.take() {
            d.shutdown();
        }
        edit(self.dir.path());
        let env: &[(&str, &str)] = if self.overrides.is_some() { &[] } else { &SMALL_WINDOW };
        self.daemon = Some(Daemon::start(self.dir.path(), env));
    }

    fn params(&self, key: &str, messages: &[Value]) -> Value {
        let mut params = json!({"session_id": self.session, key: messages, "tools": tool_definitions(self.fmt)});
        if let Some(config) = &self.overrides {
            params["config"] = config.clone();
        }
        if self.fmt == Format::Anthropic {
            params["system"] = json!(SYSTEM);
        }
        // Declared, so the wire name is exercised (the items would be detected too).
        if self.fmt == Format::OpenaiResponses {
            params["format"] = json!(self.fmt.wire_name());
        }
        params
    }

    /// `context.prepare` with `messages` or `append` (`key`).
    fn prepare(&mut self, key: &str, messages: &[Value]) -> Value {
        let params = self.params(key, messages);
        self.d().call("context.prepare", params)
    }

    fn inspect(&mut self) -> Value {
        let session = self.session.clone();
        self.d().call("context.inspect", json!({"session_id": session}))
    }

    /// Checks a result against the history and records its compactions.
    fn accept(&mut self, result: Value) {
        check_request(self.fmt, &self.sent, &result);
        assert_eq!(
            n(&result["reconciliation"]["session_messages"]) as usize,
            self.sent.len()
        );
        for report in actions(&result, "compacted") {
            check_report(report, false);
            let summary = &result["compact_summary"];
            assert_eq!(
                summary["archive"].as_array().unwrap().last(),
                Some(&report["archive"]),
                "the summary's path guide ends with the new range"
            );
            let mut report = report.clone();
            report.as_object_mut().unwrap().remove("kind");
            self.reports.push(report);
        }
        self.last = result;
    }

    /// The next message of the agent loop.
    fn next_message(&mut self) -> Value {
        if self.queue.is_empty() {
            self.queue.extend(agent_step(self.fmt, &AGENT_LOOP, self.next_step));
            self.next_step += 1;
        }
        self.queue.pop_front().unwrap()
    }

    /// Appends one message, as an agent loop does before each model call, and checks how the
    /// window evolves: below the threshold nothing is compacted and the total grows; at the
    /// threshold a compaction brings it back under.
    fn push(&mut self, message: Value) -> Value {
        let before = n(&self.last["tokens"]["total"]);
        self.sent.push(message.clone());
        let result = self.prepare("append", &[message]);
        let tokens = &result["tokens"];
        let (total, threshold) = (n(&tokens["total"]), n(&tokens["threshold"]));
        assert_eq!(n(&result["reconciliation"]["appended"]), 1);
        let compacted = actions(&result, "compacted");
        match compacted[..] {
            [] => {
                assert!(
                    total < threshold,
                    "no compaction at {total} tokens, threshold {threshold}"
                );
                // Only a large result leaving the recent window (cut to the old-phase limit,
                // reported as `truncated`) may shrink the request.
                if !actions(&result, "truncated").iter().any(|a| a["phase"] == "old") {
                    assert!(total > before, "the request did not grow: {before} → {total}");
                }
            }
            [report] => {
                assert!(
                    n(&report["tokens_before"]) >= threshold,
                    "compacted below the threshold: {report}"
                );
                assert!(
                    total < threshold,
                    "still {total} tokens after compacting (threshold {threshold})"
                );
            }
            _ => panic!("several compactions in one call: {}", pretty(&compacted)),
        }
        self.accept(result.clone());
        result
    }

    fn push_next(&mut self) -> Value {
        let message = self.next_message();
        self.push(message)
    }

    /// Pushes messages until `count` compactions happened (stopping right after the call that
    /// did the last one).
    fn run_until_compactions(&mut self, count: usize) {
        for _ in 0..200 {
            if self.reports.len() >= count {
                return;
            }
            self.push_next();
        }
        panic!("only {} compactions after 200 messages", self.reports.len());
    }

    /// Pushes the rest of the current step, so the history ends on a whole turn.
    fn finish_step(&mut self) {
        while let Some(message) = self.queue.pop_front() {
            self.push(message);
        }
    }
}

/// Every message the agent ever sent is recoverable byte for byte (see
/// [`checks::assert_nothing_lost`]).
fn assert_nothing_lost(a: &mut Agent) {
    let d = a.daemon.as_mut().expect("daemon running");
    checks::assert_nothing_lost(d, a.dir.path(), &a.session, a.fmt, &a.sent, &a.last);
}

/// The path guide in the summary names each archive range, and those lines hold exactly the
/// messages of that compaction.
fn assert_path_guide(a: &mut Agent) {
    let text = summary_text(&a.last).expect("a summary in the request");
    let ranges = a.last["compact_summary"]["archive"].as_array().unwrap().clone();
    assert_eq!(ranges.len(), a.reports.len(), "one range per compaction");
    let lines = archive_lines(a.dir.path());
    for (range, report) in ranges.iter().zip(&a.reports) {
        assert_eq!(range, &report["archive"]);
        let file = range["file"].as_str().unwrap();
        let (start, end) = (n(&range["start_line"]) as usize, n(&range["end_line"]) as usize);
        assert!(
            text.contains(file) && text.contains(&format!("{start}-{end}")),
            "the path guide does not name {file} lines {start}-{end}:\n{text}"
        );
        let held: Vec<&Value> = lines
            .iter()
            .filter(|(f, l, _)| f == file && (start..=end).contains(l))
            .map(|(_, _, v)| v)
            .collect();
        assert_eq!(held.len(), end + 1 - start);
        let indices: BTreeSet<u64> = held.iter().map(|v| n(&v["index"])).collect();
        assert_eq!(
            indices.len() as u64,
            n(&range["messages"]),
            "lines {start}-{end} of {file}"
        );
        assert_eq!(indices.first(), Some(&n(&range["first_index"])));
        assert_eq!(indices.last(), Some(&n(&range["last_index"])));
        for v in held {
            assert_eq!(v["session_id"], a.session.as_str());
            assert_eq!(
                v["compaction_id"], report["id"],
                "line of another compaction inside {file} {start}-{end}"
            );
        }
    }
    // The agent reads the range through satchel, as the guide says.
    let first = &ranges[0];
    let slice = a.d().call(
        "context.read",
        json!({"path": first["file"], "start_line": first["start_line"], "max_bytes": 1_000_000}),
    );
    let line: Value = serde_json::from_str(slice["content"].as_str().unwrap().lines().next().unwrap()).unwrap();
    assert_eq!(line["index"], first["first_index"]);
}

// ---------------------------------------------------------------------------------------------
// 1. Crossing the threshold
// ---------------------------------------------------------------------------------------------

/// Drives an agent loop across several compactions; `push` and `accept` check every request.
fn threshold_crossing(fmt: Format, per_request: bool) {
    let mut a = Agent::start(fmt, per_request);
    a.run_until_compactions(3);
    a.finish_step();
    let first = &a.reports[0];
    assert!(
        n(&first["archive"]["first_index"]) <= 2,
        "the first compaction starts at the beginning: {first}"
    );
    // The task is the only user message until step 4: it stays while it is the newest.
    assert!(a.reports.iter().all(|r| n(&r["tokens_after"]) < n(&r["tokens_before"])));
    let summary = a.last["compact_summary"].clone();
    assert!(n(&a.last["tokens"]["summary"]) > 0);
    assert!(
        n(&a.last["tokens"]["summary"]) <= SUMMARY_BUDGET + 100,
        "the summary message ({} tokens) is far over summary_max_tokens {SUMMARY_BUDGET}",
        a.last["tokens"]["summary"]
    );
    assert_eq!(summary["archive"].as_array().unwrap().len(), a.reports.len());
}

#[test]
fn openai_agent_loop_is_compacted_at_the_threshold() {
    threshold_crossing(Format::Openai, false);
}

#[test]
fn anthropic_agent_loop_is_compacted_at_the_threshold() {
    threshold_crossing(Format::Anthropic, true);
}

#[test]
fn responses_agent_loop_is_compacted_at_the_threshold() {
    threshold_crossing(Format::OpenaiResponses, false);
}

#[test]
fn initialize_lists_the_compaction_methods() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(dir.path(), &[]);
    let init = d.call("initialize", json!({}));
    let methods = init["methods"].as_array().unwrap();
    for method in ["context.compact", "context.inspect"] {
        assert!(methods.contains(&json!(method)), "{method} missing from {methods:?}");
    }
    let config = &init["config"];
    assert_eq!(
        (
            config["compact_enabled"].as_bool(),
            config["summary_max_tokens"].as_u64(),
            config["summary_window_share"].as_f64()
        ),
        (Some(true), Some(0), Some(0.08))
    );
}

#[test]
fn the_compaction_report_matches_the_request_it_produced() {
    let mut a = Agent::start(Format::Openai, false);
    a.run_until_compactions(1);
    let report = &a.reports[0];
    assert_eq!(
        report["tokens_after"], a.last["tokens"]["total"],
        "tokens_after of the compaction is not the size of the request returned with it"
    );
}

// ---------------------------------------------------------------------------------------------
// 2. Nothing lost
// ---------------------------------------------------------------------------------------------

#[test]
fn every_message_is_recoverable_after_several_compactions() {
    for fmt in [Format::Openai, Format::Anthropic, Format::OpenaiResponses] {
        let mut a = Agent::start(fmt, fmt == Format::Anthropic);
        a.run_until_compactions(4);
        a.finish_step();
        assert_nothing_lost(&mut a);
        assert_path_guide(&mut a);
        // Offloaded results that were compacted keep their full text in the archive line.
        let archived = archived(a.dir.path(), &a.session);
        let big = archived
            .values()
            .filter(|l| l["message"].to_string().len() > OFFLOAD_ABOVE + 200 && !l["offloads"].is_null())
            .count();
        assert!(
            big > 0,
            "{fmt:?}: no large tool result was compacted; the test lost its point"
        );
        assert_log_has_no_pending_compaction(a.dir.path(), &a.session);
    }
}

// ---------------------------------------------------------------------------------------------
// 3. Incremental summary
// ---------------------------------------------------------------------------------------------

#[test]
fn a_second_compaction_merges_the_first_summary() {
    let mut a = Agent::start(Format::Openai, false);
    a.run_until_compactions(1);
    let first_summary = summary_text(&a.last).unwrap();
    let first_structured = a.last["compact_summary"].clone();
    let first_range = a.reports[0]["archive"].clone();
    // Index 2 is the first tool call (after the system message and the task).
    assert!(n(&first_range["first_index"]) <= 2 && n(&first_range["last_index"]) >= 2);
    assert!(
        first_summary.contains(FIRST_COMMAND),
        "the first summary lacks the command of the first tool call:\n{first_summary}"
    );
    a.run_until_compactions(2);
    let second = a.reports[1].clone();
    // The second span follows the first, except that it may take the task, which the first
    // kept as the newest user message.
    let second_first = n(&second["archive"]["first_index"]);
    assert!(second_first > n(&first_range["last_index"]) || second_first < n(&first_range["first_index"]));
    assert!(n(&second["archive"]["last_index"]) > n(&first_range["last_index"]));
    let summary = summary_text(&a.last).unwrap();
    assert!(
        summary.contains(FIRST_COMMAND),
        "the second summary dropped the first span's command `{FIRST_COMMAND}` instead of merging it:\n{summary}"
    );
    // Every identifier the first summary kept is still there, merged, not re-summarised: listed,
    // or (older identifiers give way to the newest span's when the budget is tight) counted in
    // its list's omitted groups, under its program or directory.
    let first_context = &first_structured["critical_context"];
    let context = &a.last["compact_summary"]["critical_context"];
    for key in ["commands", "files_modified", "files_read"] {
        let omitted = context["omitted"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|o| o["list"] == key);
        for item in first_context[key].as_array().unwrap() {
            let text = item.as_str().unwrap();
            let counted = omitted.is_some_and(|o| {
                o["groups"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|g| text.starts_with(g["name"].as_str().unwrap()))
            });
            assert!(
                context[key].as_array().unwrap().contains(item) || counted,
                "{key}: {item} of the first summary is gone from the second:\n{summary}"
            );
        }
    }
    assert_eq!(
        a.last["compact_summary"]["archive"],
        json!([first_range, second["archive"]]),
        "the path guide lists both ranges"
    );
}

// ---------------------------------------------------------------------------------------------
// 4. Resending
// ---------------------------------------------------------------------------------------------

#[test]
fn a_client_resending_its_history_gets_the_same_compacted_view() {
    for fmt in [Format::Openai, Format::Anthropic, Format::OpenaiResponses] {
        let mut a = Agent::start(fmt, false);
        a.run_until_compactions(2);
        a.finish_step();
        let view = a.last["messages"].clone();

        // The original, full history.
        let sent = a.sent.clone();
        let again = a.prepare("messages", &sent);
        assert_eq!(
            again["messages"], view,
            "{fmt:?}: the original history gives another view"
        );
        let r = &again["reconciliation"];
        assert_eq!(
            (n(&r["reused"]), n(&r["appended"]), n(&r["replaced"])),
            (sent.len() as u64, 0, 0),
            "{r}"
        );
        assert!(actions(&again, "compacted").is_empty(), "{fmt:?}: compacted again");
        assert_eq!(again["compact_summary"], a.last["compact_summary"]);
        a.accept(again);

        // The returned view plus one new message.
        let new = a.next_message();
        a.sent.push(new.clone());
        let mut history: Vec<Value> = view.as_array().unwrap().clone();
        history.push(new);
        let next = a.prepare("messages", &history);
        let r = &next["reconciliation"];
        assert_eq!((n(&r["appended"]), n(&r["replaced"])), (1, 0), "{fmt:?}: {r}");
        assert_eq!(n(&r["reused"]) as usize, history.len() - 1);
        a.accept(next);

        // And the original history with one more message on top of that.
        let new = a.next_message();
        a.sent.push(new);
        let sent = a.sent.clone();
        let next = a.prepare("messages", &sent);
        let r = &next["reconciliation"];
        assert_eq!(
            (n(&r["reused"]), n(&r["appended"])),
            (sent.len() as u64 - 1, 1),
            "{fmt:?}: {r}"
        );
        a.accept(next);
        assert_nothing_lost(&mut a);
    }
}

// ---------------------------------------------------------------------------------------------
// 5. context.compact
// ---------------------------------------------------------------------------------------------

const REQUIREMENT: &str = "Always run clippy before committing, and never push to main directly.";
const DECISION: &str =
    "Let's keep the old lexer behind a feature flag because removing it would change the public API.";

/// A short conversation ending with a new user request right after a long tool result.
fn short_conversation() -> Vec<Value> {
    vec![
        system(SYSTEM),
        user(TASK),
        assistant(DECISION),
        user(REQUIREMENT),
        call_message(
            Format::Openai,
            "call_0",
            "bash",
            &json!({"command": FIRST_COMMAND}),
            "Building.",
        ),
        result_message(Format::Openai, "call_0", &tool_output(0, 2_400, FIRST_FILE)),
        user("Next, update the changelog."),
    ]
}

#[test]
fn context_compact_follows_the_instruction_then_has_nothing_left() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(dir.path(), &SMALL_WINDOW);
    let history = short_conversation();
    let first = d.call("context.prepare", json!({"session_id": "s", "messages": history}));
    assert!(actions(&first, "compacted").is_empty() && first.get("compact_summary").is_none());

    let instruction = "keep requirements and decisions only";
    let done = d.call(
        "context.compact",
        json!({"session_id": "s", "instruction": instruction}),
    );
    assert_eq!(
        n(&done["compacted"]),
        5,
        "everything before the newest user message: {done}"
    );
    check_report(&done["compaction"], true);
    let summary = &done["summary"];
    assert_eq!(summary["instruction"], instruction, "the instruction is recorded");
    assert_eq!(summary["archive"], json!([done["compaction"]["archive"]]));
    let text = done["summary_text"].as_str().unwrap();
    assert!(text.starts_with(SUMMARY_HEADING), "{text}");
    assert!(
        text.contains("public API"),
        "the stated requirement and decision are not kept:\n{text}"
    );
    assert!(
        !text.contains(FIRST_COMMAND),
        "commands kept despite \"requirements and decisions only\":\n{text}"
    );

    // What remains is the newest user message: nothing more to compact, and no error.
    let again = d.call("context.compact", json!({"session_id": "s"}));
    assert_eq!(n(&again["compacted"]), 0, "{again}");
    assert!(again["compaction"].is_null(), "{again}");
    assert_eq!(&again["summary"], summary, "the summary stays as it was");

    let inspect = d.call("context.inspect", json!({"session_id": "s"}));
    let compactions = inspect["compactions"].as_array().unwrap();
    assert_eq!(compactions.len(), 1);
    assert_eq!(compactions[0], done["compaction"]);
    assert_eq!(inspect["summary"]["instruction"], instruction);
    assert_eq!((n(&inspect["messages"]), n(&inspect["archived_messages"])), (2, 5));

    // The next request carries the summary; the original history is still recognised.
    let mut more = history.clone();
    more.push(assistant("Changelog updated."));
    let next = d.call("context.prepare", json!({"session_id": "s", "messages": more}));
    check_request(Format::Openai, &more, &next);
    assert_eq!(summary_text(&next).as_deref(), Some(text));
    assert_eq!(n(&next["reconciliation"]["reused"]), 7);
    let archived = archived(dir.path(), "s");
    assert_eq!(archived.keys().copied().collect::<Vec<_>>(), [1, 2, 3, 4, 5]);
    for (index, line) in archived {
        assert_eq!(line["message"], history[index]);
    }
}

#[test]
fn context_compact_and_inspect_reject_bad_params_and_unknown_sessions() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(dir.path(), &SMALL_WINDOW);
    d.call(
        "context.prepare",
        json!({"session_id": "s", "messages": short_conversation()}),
    );
    for method in ["context.compact", "context.inspect"] {
        let e = d.call_err(method, json!({"session_id": "nope"}));
        assert_eq!(error_code(&e), -32001, "{method}: {e}");
        let e = d.call_err(method, json!({}));
        assert_eq!(error_code(&e), -32602, "{method}: {e}");
        assert!(
            e.to_string().contains("session_id"),
            "{method}: the error names the field: {e}"
        );
        let e = d.call_err(method, json!({"session_id": "s", "bogus": 1}));
        assert_eq!(error_code(&e), -32602, "{method}: {e}");
        assert!(e.to_string().contains("bogus"), "{method}: {e}");
        let e = d.call_err(method, json!({"session_id": "../s"}));
        assert_eq!(error_code(&e), -32602, "{method}: {e}");
    }
    let e = d.call_err(
        "context.compact",
        json!({"session_id": "s", "config": {"max_input_length": 10}}),
    );
    assert_eq!(error_code(&e), -32602, "{e}");
    // Nothing was compacted by the failed calls.
    let inspect = d.call("context.inspect", json!({"session_id": "s"}));
    assert_eq!((n(&inspect["messages"]), n(&inspect["archived_messages"])), (7, 0));
    assert!(archive_lines(dir.path()).is_empty());
}

// ---------------------------------------------------------------------------------------------
// 6. context.inspect
// ---------------------------------------------------------------------------------------------

#[test]
fn inspect_reports_zones_summary_offloads_and_history() {
    let mut a = Agent::start(Format::Openai, false);
    let fresh = a.inspect();
    assert_eq!(
        fresh["tokens"], a.last["tokens"],
        "inspect shows the last prepare's tokens"
    );
    assert_eq!(fresh["pressure"], "low");
    assert_eq!(
        fresh["format"],
        Value::Null,
        "plain text turns do not tell the format yet"
    );
    assert_eq!((n(&fresh["messages"]), n(&fresh["archived_messages"])), (2, 0));
    assert!(fresh["summary"].is_null() && fresh["compactions"] == json!([]) && fresh["offloaded"] == json!([]));

    a.run_until_compactions(2);
    a.finish_step();
    // A large result at the end: offloaded, and live.
    let id = "call_big";
    let call = call_message(
        Format::Openai,
        id,
        "bash",
        &json!({"command": "cargo test -p parser"}),
        "Testing.",
    );
    a.push(call);
    let output = tool_output(99, 4_000, "crates/parser/src/lib.rs");
    a.push(result_message(Format::Openai, id, &output));

    let inspect = a.inspect();
    assert_eq!(inspect["format"], "openai");
    let tokens = &inspect["tokens"];
    assert_eq!(tokens, &a.last["tokens"], "inspect shows the last prepare's tokens");
    check_zones(tokens);
    // (`reserved` is 0 here: the newest message alone is larger than the reserve.)
    for zone in ["system", "tools", "summary", "compactable"] {
        assert!(n(&tokens[zone]) > 0, "zone {zone} is empty: {tokens}");
    }
    assert_eq!(n(&tokens["limit"]), WINDOW);
    assert_eq!(inspect["pressure"], expected_pressure(tokens), "{tokens}");
    assert_eq!(inspect["summary"], a.last["compact_summary"]);
    assert_eq!(inspect["compactions"], json!(a.reports), "the compaction history");
    for c in inspect["compactions"].as_array().unwrap() {
        check_report(c, false);
    }

    let offloaded = inspect["offloaded"].as_array().unwrap();
    let last_index = a.sent.len() - 1;
    assert!(
        offloaded
            .iter()
            .any(|o| n(&o["index"]) as usize == last_index && o["pointer"] == "/content"),
        "the large result is not listed: {}",
        pretty(offloaded)
    );
    for o in offloaded {
        let file = a.dir.path().join(o["file"].as_str().unwrap());
        let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        assert_eq!(n(&o["total_bytes"]) as usize, text.len());
        let index = n(&o["index"]) as usize;
        assert_eq!(
            a.sent[index].pointer(o["pointer"].as_str().unwrap()).unwrap(),
            &json!(text)
        );
    }
    // Every live message with a large result is listed (compacted ones are in the archive).
    let archived = archived(a.dir.path(), &a.session);
    let expected: BTreeSet<usize> = (0..a.sent.len())
        .filter(|i| !archived.contains_key(i))
        .filter(|&i| role(&a.sent[i]) == "tool" && a.sent[i]["content"].as_str().unwrap().len() > OFFLOAD_ABOVE)
        .collect();
    let listed: BTreeSet<usize> = offloaded.iter().map(|o| n(&o["index"]) as usize).collect();
    assert_eq!(listed, expected);
    assert_eq!(n(&inspect["archived_messages"]) as usize, archived.len());
}

#[test]
fn pressure_rises_to_critical_when_compaction_is_off() {
    pressure_levels(json!({"compact_enabled": false, "max_input_length": 1024}));
}

#[test]
fn pressure_follows_the_threshold_ratio_of_the_request() {
    pressure_levels(json!({"compact_enabled": false, "max_input_length": 1024, "compact_threshold_ratio": 0.6}));
}

/// Grows a session with compaction off until the window overflows; `context.inspect` reports
/// every pressure level in turn.
fn pressure_levels(config: Value) {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(dir.path(), &SMALL_WINDOW);
    let mut seen: Vec<String> = Vec::new();
    let mut history = vec![user("Plan the parser rewrite.")];
    let mut last = Value::Null;
    for i in 0..200 {
        let params = json!({"session_id": "p", "messages": history, "config": config});
        last = d.call("context.prepare", params);
        assert!(
            actions(&last, "compacted").is_empty(),
            "compacted although compact_enabled is false"
        );
        let inspect = d.call("context.inspect", json!({"session_id": "p"}));
        assert_eq!(inspect["tokens"], last["tokens"]);
        let level = inspect["pressure"].as_str().unwrap().to_owned();
        assert_eq!(level, expected_pressure(&last["tokens"]), "{}", last["tokens"]);
        // One scale: the monitor says the same level in AceClaw's words.
        let aceclaw = match level.as_str() {
            "low" => "normal",
            "medium" => "watch",
            "high" => "compact",
            _ => "critical",
        };
        assert_eq!(inspect["monitor"]["pressure_level"], aceclaw, "{}", last["tokens"]);
        if seen.last() != Some(&level) {
            seen.push(level.clone());
        }
        if level == "critical" {
            break;
        }
        let text = format!(
            "Point {i}: the tokenizer must handle raw strings, nested block comments, byte literals and \
             shebang lines without allocating per token."
        );
        history.push(if i % 2 == 0 { assistant(&text) } else { user(&text) });
    }
    assert_eq!(seen, ["low", "medium", "high", "critical"], "pressure levels in order");
    assert!(
        last["over_limit"].is_string(),
        "over the limit without explanation: {}",
        last["tokens"]
    );
    assert_eq!(
        last["messages"].as_array().unwrap().len(),
        history.len(),
        "nothing was dropped"
    );
    let inspect = d.call("context.inspect", json!({"session_id": "p"}));
    assert_eq!(n(&inspect["archived_messages"]), 0);
    assert!(archive_lines(dir.path()).is_empty());
}

// ---------------------------------------------------------------------------------------------
// 7. Crashes during compaction
// ---------------------------------------------------------------------------------------------

#[test]
fn openai_view_sent_back_after_a_restart_keeps_its_summary() {
    view_sent_back_after_a_restart(Format::Openai);
}

#[test]
fn anthropic_view_sent_back_after_a_restart_keeps_its_summary() {
    view_sent_back_after_a_restart(Format::Anthropic);
}

/// A client whose history is the request satchel returned (summary included) sends it back
/// with a new message after the daemon restarted.
fn view_sent_back_after_a_restart(fmt: Format) {
    let mut a = Agent::start(fmt, false);
    a.run_until_compactions(1);
    a.finish_step();
    let view = a.last["messages"].as_array().unwrap().clone();
    let summary = a.last["compact_summary"].clone();
    let archived_before = archived(a.dir.path(), &a.session);
    a.restart(|_| {});

    let new = a.next_message();
    a.sent.push(new.clone());
    let mut history = view.clone();
    history.push(new);
    let result = a.prepare("messages", &history);
    let r = &result["reconciliation"];
    assert_eq!(
        (n(&r["appended"]), n(&r["replaced"])),
        (1, 0),
        "{fmt:?}: after a restart, the returned view sent back is not recognised: {r}"
    );
    assert_eq!(result["compact_summary"], summary, "{fmt:?}: the summary is lost");
    assert_eq!(archived(a.dir.path(), &a.session), archived_before);
    a.accept(result);
}

#[test]
fn a_manual_compaction_reports_the_request_tokens() {
    let mut a = Agent::start(Format::Openai, false);
    for _ in 0..6 {
        a.push_next();
    }
    assert!(a.reports.is_empty(), "the test wants a manual compaction first");
    let before = n(&a.last["tokens"]["total"]);
    let session = a.session.clone();
    let done = a.d().call("context.compact", json!({"session_id": session}));
    check_report(&done["compaction"], true);
    let sent = a.sent.clone();
    let after = a.prepare("messages", &sent);
    assert!(actions(&after, "compacted").is_empty());
    let report = &done["compaction"];
    assert_eq!(
        (n(&report["tokens_before"]), n(&report["tokens_after"])),
        (before, n(&after["tokens"]["total"])),
        "tokens before/after of a manual compaction differ from the requests before and after it"
    );
}

/// How much of an interrupted compaction reached the dialog archive.
#[derive(Debug, Clone, Copy)]
enum Reached {
    /// Every line (the crash came between the archive append and the done record).
    AllLines,
    /// None (the crash came right after the begun record).
    NoLine,
    /// The first line whole and the second torn (the crash came during the append); the
    /// session log's done record is torn as well.
    TornLine,
}

/// Runs to a compaction, then rewinds the workspace to a crash inside it, restarts, and checks
/// that the compaction is finished exactly once and the session goes on.
fn interrupted_compaction_is_finished_once(reached: Reached) {
    let mut a = Agent::start(Format::Openai, false);
    a.run_until_compactions(2);
    let report = a.reports.last().unwrap().clone();
    let id = report["id"].as_str().unwrap().to_owned();
    let range = report["archive"].clone();
    let compacted: BTreeSet<u64> = archive_lines(a.dir.path())
        .iter()
        .filter(|(_, _, v)| v["compaction_id"] == id.as_str())
        .map(|(_, _, v)| n(&v["index"]))
        .collect();
    assert_eq!(compacted.len() as u64, n(&report["messages"]));
    let session = a.session.clone();

    a.restart(|ws| {
        let log = ws.join("sessions").join(format!("{session}.jsonl"));
        let text = std::fs::read_to_string(&log).unwrap();
        let mut lines: Vec<&str> = text.lines().collect();
        let done = lines.pop().unwrap();
        let done_record: Value = serde_json::from_str(done).unwrap();
        assert_eq!(
            (done_record["record"].as_str(), done_record["id"].as_str()),
            (Some("compaction_done"), Some(&*id))
        );
        let begun: Value = serde_json::from_str(lines.last().unwrap()).unwrap();
        assert_eq!(begun["record"], "compaction_begun");
        let mut kept = lines.join("\n") + "\n";
        if let Reached::TornLine = reached {
            kept.push_str(&done[..done.len() / 2]);
        }
        std::fs::write(&log, kept).unwrap();

        let file = ws.join(range["file"].as_str().unwrap());
        let text = std::fs::read_to_string(&file).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let start = n(&range["start_line"]) as usize;
        assert_eq!(
            n(&range["end_line"]) as usize,
            lines.len(),
            "the compaction's lines end the file"
        );
        let mut kept: String = lines[..start - 1].iter().map(|l| format!("{l}\n")).collect();
        match reached {
            Reached::AllLines => kept = text.clone(),
            Reached::NoLine => {}
            Reached::TornLine => {
                kept.push_str(lines[start - 1]);
                kept.push('\n');
                let second = lines[start];
                kept.push_str(&second[..second.len() / 2]);
            }
        }
        std::fs::write(&file, kept).unwrap();
    });

    let inspect = a.inspect();
    let compactions = inspect["compactions"].as_array().unwrap();
    assert_eq!(compactions.len(), 2, "{reached:?}: {}", pretty(compactions));
    let recovered = &compactions[1];
    assert_eq!(recovered["id"], id.as_str());
    assert_eq!(recovered["messages"], report["messages"]);
    let new_range = &recovered["archive"];
    assert_eq!(new_range["first_index"], range["first_index"]);
    assert_eq!(new_range["last_index"], range["last_index"]);
    assert_eq!(
        inspect["summary"]["archive"].as_array().unwrap().last(),
        Some(new_range)
    );
    // The recovered range holds exactly the compaction's messages.
    let lines = archive_lines(a.dir.path());
    let (start, end) = (n(&new_range["start_line"]) as usize, n(&new_range["end_line"]) as usize);
    let held: BTreeSet<u64> = lines
        .iter()
        .filter(|(f, l, _)| f == new_range["file"].as_str().unwrap() && (start..=end).contains(l))
        .map(|(_, _, v)| n(&v["index"]))
        .collect();
    assert_eq!(held, compacted, "{reached:?}: lines {start}-{end}");
    assert_eq!(end + 1 - start, compacted.len(), "{reached:?}: range {new_range}");
    assert_log_has_no_pending_compaction(a.dir.path(), &a.session);

    // The session goes on: the original history is recognised and the agent continues.
    a.reports[1] = recovered.clone();
    let sent = a.sent.clone();
    let again = a.prepare("messages", &sent);
    assert_eq!(n(&again["reconciliation"]["reused"]) as usize, sent.len());
    assert!(actions(&again, "compacted").is_empty());
    a.accept(again);
    a.finish_step();
    a.run_until_compactions(3);
    a.finish_step();
    assert_nothing_lost(&mut a);
    assert_path_guide(&mut a);

    // A second restart finishes nothing again.
    a.restart(|_| {});
    let after = a.inspect();
    assert_same_history(&after["compactions"], &a.reports);
    assert_log_has_no_pending_compaction(a.dir.path(), &a.session);
    archived(a.dir.path(), &a.session);
}

/// The same compactions, `tokens_after` aside (see `compaction_history_survives_a_restart`,
/// which checks that figure on its own).
fn assert_same_history(history: &Value, reports: &[Value]) {
    let strip = |r: &Value| {
        let mut r = r.clone();
        r.as_object_mut().unwrap().remove("tokens_after");
        r
    };
    let history: Vec<Value> = history.as_array().unwrap().iter().map(strip).collect();
    let reports: Vec<Value> = reports.iter().map(strip).collect();
    assert_eq!(history, reports, "the compaction history");
}

#[test]
fn compaction_history_survives_a_restart() {
    let mut a = Agent::start(Format::Openai, false);
    a.run_until_compactions(2);
    let before = a.inspect();
    assert_eq!(before["compactions"], json!(a.reports));
    a.restart(|_| {});
    let after = a.inspect();
    assert_eq!(after["summary"], before["summary"]);
    assert_eq!(after["messages"], before["messages"]);
    assert_eq!(after["archived_messages"], before["archived_messages"]);
    // What is sent of each offloaded result is known again once the restarted daemon prepares.
    let stored = |offloaded: &Value| {
        let mut offloaded = offloaded.clone();
        for o in offloaded.as_array_mut().unwrap() {
            o.as_object_mut()
                .unwrap()
                .retain(|k, _| k != "phase" && k != "sent_bytes");
        }
        offloaded
    };
    assert_eq!(after["offloaded"], stored(&before["offloaded"]));
    assert_eq!(
        after["compactions"], before["compactions"],
        "the compaction history reads differently after a restart"
    );
}

#[test]
fn a_compaction_interrupted_after_archiving_is_finished_once() {
    interrupted_compaction_is_finished_once(Reached::AllLines);
}

#[test]
fn a_compaction_interrupted_before_archiving_is_finished_once() {
    interrupted_compaction_is_finished_once(Reached::NoLine);
}

#[test]
fn a_compaction_interrupted_during_archiving_is_finished_once() {
    interrupted_compaction_is_finished_once(Reached::TornLine);
}

#[test]
fn kill_during_compaction_leaves_a_consistent_session() {
    let mut a = Agent::start(Format::Openai, false);
    a.run_until_compactions(1);
    a.finish_step();
    let session = a.session.clone();
    for (round, delay_ms) in [0u64, 1, 2, 3, 5, 8, 12, 20].into_iter().enumerate() {
        // The next two steps at once: likely to cross the threshold. Every third round, a
        // manual compaction first.
        if round % 3 == 2 {
            a.d().request("context.compact", json!({"session_id": session}));
        }
        let mut candidate = a.sent.clone();
        for _ in 0..2 {
            candidate.extend(agent_step(Format::Openai, &AGENT_LOOP, a.next_step));
            a.next_step += 1;
        }
        let params = a.params("messages", &candidate);
        a.d().request("context.prepare", params);
        std::thread::sleep(Duration::from_millis(delay_ms));
        a.daemon.take().unwrap().kill();
        a.restart(|_| {});

        let inspect = a.inspect();
        let held = (n(&inspect["messages"]) + n(&inspect["archived_messages"])) as usize;
        assert!(
            held == a.sent.len() || held == candidate.len(),
            "round {round}: {held} messages, expected {} or {}",
            a.sent.len(),
            candidate.len()
        );
        assert_log_has_no_pending_compaction(a.dir.path(), &session);
        a.reports = inspect["compactions"].as_array().unwrap().clone();
        a.sent = candidate;
        let sent = a.sent.clone();
        let result = a.prepare("messages", &sent);
        let r = &result["reconciliation"];
        assert_eq!(
            (n(&r["reused"]) as usize, n(&r["appended"]) as usize),
            (held, sent.len() - held),
            "round {round}"
        );
        a.accept(result);
        assert_nothing_lost(&mut a);
        assert_path_guide(&mut a);
    }
    assert!(
        a.reports.len() >= 3,
        "too few compactions for the test to mean anything: {}",
        a.reports.len()
    );
}

// ---------------------------------------------------------------------------------------------
// 8. Repair
// ---------------------------------------------------------------------------------------------

#[test]
fn openai_unanswered_calls_get_results_and_orphans_are_dropped_from_the_request_only() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(dir.path(), &SMALL_WINDOW);
    let ls = json!({"command": "ls crates"});
    let history = vec![
        system(SYSTEM),
        user(TASK),
        call_message(Format::Openai, "call_a", "bash", &ls, "Listing."),
        user("Stop, use the staging branch instead."),
        json!({"role": "tool", "tool_call_id": "ghost", "content": "stray output"}),
        assistant("Switched to staging."),
        user("Go on."),
    ];
    let result = d.call("context.prepare", json!({"session_id": "r", "messages": history}));
    let messages = result["messages"].as_array().unwrap();
    check_request_shape(messages, Format::Openai).unwrap_or_else(|e| panic!("{e}\n{}", pretty(messages)));
    assert_eq!(messages[2], history[2]);
    assert_eq!(messages[3]["role"], "tool");
    assert_eq!(
        messages[3]["tool_call_id"], "call_a",
        "a synthetic result follows the call"
    );
    assert!(!messages[3]["content"].as_str().unwrap().is_empty());
    assert!(
        !messages.iter().any(|m| m["tool_call_id"] == "ghost"),
        "the orphan result is dropped"
    );
    let without_synthetic: Vec<&Value> = messages.iter().filter(|m| m["tool_call_id"] != "call_a").collect();
    let without_orphan: Vec<&Value> = history.iter().filter(|m| m["tool_call_id"] != "ghost").collect();
    assert_eq!(without_synthetic, without_orphan, "nothing else changed");
    let repairs: Vec<(String, String)> = actions(&result, "repaired")
        .iter()
        .map(|a| {
            (
                a["repair"].as_str().unwrap().to_owned(),
                a["call_id"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    assert!(
        repairs.contains(&("synthetic_result".into(), "call_a".into())),
        "{repairs:?}"
    );
    assert!(
        repairs.contains(&("dropped_orphan_result".into(), "ghost".into())),
        "{repairs:?}"
    );

    // The session keeps what the client sent, orphan included.
    let inspect = d.call("context.inspect", json!({"session_id": "r"}));
    assert_eq!(n(&inspect["messages"]), 7);
    let again = d.call("context.prepare", json!({"session_id": "r", "messages": history}));
    assert_eq!(
        (
            n(&again["reconciliation"]["reused"]),
            n(&again["reconciliation"]["appended"])
        ),
        (7, 0)
    );
    assert_eq!(again["messages"], result["messages"]);

    // A call at the very end is pending: left for the client to run.
    let pending = call_message(
        Format::Openai,
        "call_b",
        "bash",
        &json!({"command": "git status"}),
        "Checking.",
    );
    let next = d.call("context.prepare", json!({"session_id": "r", "append": [pending]}));
    let messages = next["messages"].as_array().unwrap();
    assert_eq!(messages.last(), Some(&pending));
    assert!(!messages.iter().any(|m| m["tool_call_id"] == "call_b"));
    assert!(!actions(&next, "repaired").iter().any(|a| a["call_id"] == "call_b"));
    check_request_shape(messages, Format::Openai).unwrap();

    // Compaction archives the orphan verbatim: it was never lost.
    let mut compactions = 0;
    while n(&d.call("context.compact", json!({"session_id": "r"}))["compacted"]) > 0 {
        compactions += 1;
        assert!(compactions < 10, "context.compact never runs out of messages");
    }
    assert!(compactions > 0);
    let archived = archived(dir.path(), "r");
    assert!(
        archived.contains_key(&4),
        "the orphan (index 4) is compacted: {:?}",
        archived.keys()
    );
    for (index, line) in archived {
        assert_eq!(line["message"], history[index]);
    }
    let after = d.call(
        "context.prepare",
        json!({"session_id": "r", "append": [result_message(Format::Openai, "call_b", "clean")]}),
    );
    check_request_shape(after["messages"].as_array().unwrap(), Format::Openai).unwrap();
}

#[test]
fn anthropic_unanswered_tool_use_gets_a_tool_result_block() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(dir.path(), &SMALL_WINDOW);
    let history = vec![
        user(TASK),
        call_message(
            Format::Anthropic,
            "toolu_a",
            "bash",
            &json!({"command": "ls"}),
            "Listing.",
        ),
        json!({"role": "user", "content": [{"type": "text", "text": "Actually, skip that."}]}),
        assistant("Skipped."),
        json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_ghost", "content": "stray"},
            {"type": "text", "text": "Go on."},
        ]}),
    ];
    let params = json!({"session_id": "r", "messages": history, "format": "anthropic", "system": SYSTEM});
    let result = d.call("context.prepare", params);
    let messages = result["messages"].as_array().unwrap();
    check_request_shape(messages, Format::Anthropic).unwrap_or_else(|e| panic!("{e}\n{}", pretty(messages)));
    let answer = blocks(&messages[2]).next().unwrap();
    assert_eq!(
        (answer["type"].as_str(), answer["tool_use_id"].as_str()),
        (Some("tool_result"), Some("toolu_a"))
    );
    assert!(blocks(&messages[2]).any(|b| *b == json!({"type": "text", "text": "Actually, skip that."})));
    assert!(
        !result.to_string().contains("\"stray\""),
        "the orphan result is dropped"
    );
    assert!(
        blocks(messages.last().unwrap()).any(|b| *b == json!({"type": "text", "text": "Go on."})),
        "the rest of the orphan's message stays"
    );
    let repairs: Vec<&str> = actions(&result, "repaired")
        .iter()
        .map(|a| a["repair"].as_str().unwrap())
        .collect();
    assert!(
        repairs.contains(&"synthetic_result") && repairs.contains(&"dropped_orphan_result"),
        "{repairs:?}"
    );
    let inspect = d.call("context.inspect", json!({"session_id": "r"}));
    assert_eq!(n(&inspect["messages"]), 5, "the session keeps what the client sent");

    // A pending tool_use at the very end stays unanswered.
    let pending = call_message(
        Format::Anthropic,
        "toolu_b",
        "bash",
        &json!({"command": "git status"}),
        "Checking.",
    );
    let next = d.call(
        "context.prepare",
        json!({"session_id": "r", "append": [pending], "system": SYSTEM}),
    );
    let messages = next["messages"].as_array().unwrap();
    assert_eq!(messages.last(), Some(&pending));
    check_request_shape(messages, Format::Anthropic).unwrap();
}
