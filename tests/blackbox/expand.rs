//! Black-box tests of "what compaction dropped, and getting it back": the real daemon
//! compacts an agent loop, reports what its summary no longer names, and `context.expand`
//! brings the span back from the archive into the next request only: byte-exact where nothing
//! is cut, tool calls with their results, within its budget, in both formats.

use std::sync::mpsc::RecvTimeoutError;

use serde_json::{Value, json};

use crate::support::builders::{AgentLoop, SYSTEM, agent_step, system, user};
use crate::support::checks::error_code;
use crate::support::trajectories::{Format, check_request_shape};
use crate::support::{Daemon, REPLY_TIMEOUT, actions, archive_lines, archived};

const SESSION: &str = "expand";
const SMALL_WINDOW: [(&str, &str); 2] = [
    ("SATCHEL_MAX_INPUT_LENGTH", "4096"),
    ("SATCHEL_SUMMARY_MAX_TOKENS", "300"),
];
const AGENT_LOOP: AgentLoop = AgentLoop {
    check_bytes: 900,
    test_bytes: 1_500,
    runs_tests: |s| s % 4 == 2,
    reply: |s| format!("Module {s} builds now."),
};

/// Sends an agent loop step by step until a compaction happens; returns the history and the
/// compaction action.
fn compact_once(daemon: &mut Daemon, format: Format) -> (Vec<Value>, Value) {
    let mut messages = vec![
        system(SYSTEM),
        user("Fix the failing build of the parser crate. Keep the MSRV at 1.70."),
    ];
    if format == Format::Anthropic {
        messages.remove(0);
    }
    for step in 0..60 {
        messages.extend(agent_step(format, &AGENT_LOOP, step));
        let result = daemon.call(
            "context.prepare",
            json!({"session_id": SESSION, "messages": messages, "system": SYSTEM}),
        );
        if let Some(compacted) = actions(&result, "compacted").first() {
            return (messages, (*compacted).clone());
        }
    }
    panic!("no compaction in 60 steps");
}

/// An Anthropic message's content as blocks (a string is one text block).
fn content_blocks(message: &Value) -> Vec<Value> {
    match &message["content"] {
        Value::String(text) => vec![json!({"type": "text", "text": text})],
        Value::Array(blocks) => blocks.clone(),
        other => panic!("content {other}"),
    }
}

fn check_expand(format: Format) {
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = Daemon::start(dir.path(), &SMALL_WINDOW);
    let (messages, compacted) = compact_once(&mut daemon, format);
    let id = compacted["id"].as_str().unwrap();
    let dropped = compacted["dropped"].as_array().cloned().unwrap_or_default();
    assert!(
        !dropped.is_empty(),
        "a 300-token summary of {compacted} names everything?"
    );
    for item in &dropped {
        assert!(item["kind"].is_string() && item["text"].is_string(), "{item}");
    }

    let added = daemon.call(
        "context.expand",
        json!({"session_id": SESSION, "compaction_id": id, "max_tokens": 1200}),
    );
    let count = added["messages"].as_u64().unwrap() as usize;
    assert!(count > 0 && added["tokens"].as_u64().unwrap() <= 1200, "{added}");
    assert_eq!(
        added["archive"]["end_line"], compacted["archive"]["end_line"],
        "{added}"
    );

    let next = daemon.call(
        "context.prepare",
        json!({"session_id": SESSION, "messages": messages, "system": SYSTEM}),
    );
    let sent = next["messages"].as_array().unwrap();
    check_request_shape(sent, format)
        .unwrap_or_else(|e| panic!("{e}: {}", serde_json::to_string_pretty(sent).unwrap()));
    assert!(next["tokens"]["expanded"].as_u64().unwrap() > 0, "{}", next["tokens"]);
    // The span's messages are in the request, as archived (no result here is over the
    // recent-phase limit), newest ones right before the live messages.
    let archive = archived(dir.path(), SESSION);
    let first = added["archive"]["first_index"].as_u64().unwrap() as usize;
    let last = added["archive"]["last_index"].as_u64().unwrap() as usize;
    assert_eq!(last - first + 1, count);
    let span: Vec<&Value> = (first..=last).map(|i| &archive[&i]["message"]).collect();
    match format {
        // Right after the summary message, as archived.
        Format::Openai | Format::OpenaiResponses => {
            let at = sent
                .iter()
                .position(|m| m["role"] != "system" && m["role"] != "developer")
                .unwrap()
                + 1;
            let shown: Vec<&Value> = sent[at..at + count].iter().collect();
            assert_eq!(shown, span);
        }
        // Roles alternate, so the summary is a block of the first user message and
        // neighbours may be merged: every block of the span is there, in order.
        Format::Anthropic => {
            let blocks: Vec<Value> = sent.iter().flat_map(content_blocks).collect();
            let wanted: Vec<Value> = span.iter().copied().flat_map(content_blocks).collect();
            let start = blocks
                .iter()
                .position(|b| *b == wanted[0])
                .expect("the span's first block");
            assert_eq!(&blocks[start..start + wanted.len()], &wanted[..]);
        }
    }

    // Once.
    let after = daemon.call(
        "context.prepare",
        json!({"session_id": SESSION, "messages": messages, "system": SYSTEM}),
    );
    assert!(after["tokens"].get("expanded").is_none(), "{}", after["tokens"]);
    assert!(after["messages"].as_array().unwrap().len() < sent.len());

    // Refusals keep the daemon serving.
    let reply = daemon.call_raw(
        "context.expand",
        json!({"session_id": SESSION, "compaction_id": "nope"}),
    );
    assert_eq!(error_code(&reply["error"]), -32602, "{reply}");
    let reply = daemon.call_raw(
        "context.expand",
        json!({"session_id": SESSION, "archive": {"file": "dialog/../sessions/expand.jsonl", "start_line": 1, "end_line": 3}}),
    );
    assert_eq!(error_code(&reply["error"]), -32602, "{reply}");
    daemon.shutdown();
}

#[test]
fn a_compacted_span_comes_back_once_openai() {
    check_expand(Format::Openai);
}

#[test]
fn a_compacted_span_comes_back_once_anthropic() {
    check_expand(Format::Anthropic);
}

#[test]
fn watchers_hear_a_compaction_start_and_what_it_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = Daemon::start(dir.path(), &SMALL_WINDOW);
    daemon.call("context.watch", json!({"session_id": SESSION}));
    let mut messages = vec![
        system(SYSTEM),
        user("Fix the failing build of the parser crate. Keep the MSRV at 1.70."),
    ];
    let mut frames = Vec::new();
    for step in 0..60 {
        messages.extend(agent_step(Format::Openai, &AGENT_LOOP, step));
        let reply = daemon.call_raw_answering(
            "context.prepare",
            json!({"session_id": SESSION, "messages": messages}),
            |frame| {
                frames.push(frame.clone());
                None
            },
        );
        if !actions(&reply["result"], "compacted").is_empty() {
            break;
        }
    }
    // The call's own event may come after its reply: wait for it.
    let event_of_call = loop {
        let event = frames
            .iter()
            .find(|f| f["params"]["kind"] == "prepare" && f["params"]["compaction"].is_object());
        if let Some(event) = event {
            break event.clone();
        }
        frames.push(daemon.next_frame().1);
    };
    let started = frames
        .iter()
        .position(|f| f["params"]["kind"] == "compaction_started")
        .expect("a compaction_started event");
    let start = &frames[started]["params"]["compaction"];
    assert!(
        start["id"].is_null() && start["messages"].as_u64().unwrap() > 0,
        "{start}"
    );
    assert!(
        start["tokens_before"].as_u64().unwrap() >= start["threshold"].as_u64().unwrap(),
        "{start}"
    );
    let done = &event_of_call["params"]["compaction"];
    assert!(done["id"].is_string(), "{done}");
    assert!(done["tokens_after"].as_u64().unwrap() < done["tokens_before"].as_u64().unwrap());
    assert!(
        done["dropped"]
            .as_array()
            .is_some_and(|d| !d.is_empty() && d.len() <= 5),
        "{done}"
    );
    daemon.shutdown();
}

/// Without `max_tokens`, the span is budgeted against the session's window (the
/// `max_input_length` its prepares asked for), not the daemon's: before and after a restart.
#[test]
fn expand_budgets_against_the_sessions_window() {
    let dir = tempfile::tempdir().unwrap();
    let session_config = json!({"max_input_length": 4096, "summary_max_tokens": 300});
    let mut daemon = Daemon::start(dir.path(), &[]);
    let mut messages = vec![
        system(SYSTEM),
        user("Fix the failing build of the parser crate. Keep the MSRV at 1.70."),
    ];
    let compaction_id = (0..60)
        .find_map(|step| {
            messages.extend(agent_step(Format::Openai, &AGENT_LOOP, step));
            let result = daemon.call(
                "context.prepare",
                json!({"session_id": SESSION, "messages": messages, "config": session_config}),
            );
            actions(&result, "compacted")
                .first()
                .map(|c| c["id"].as_str().unwrap().to_owned())
        })
        .expect("the session's 4,096-token window compacts");
    let expand = json!({"session_id": SESSION, "compaction_id": compaction_id});
    // A quarter of the session's window at most; the daemon's own window is 131,072 tokens.
    let quarter = 4096 / 4;
    let added = daemon.call("context.expand", expand.clone());
    assert!(added["budget_tokens"].as_u64().unwrap() <= quarter, "{added}");
    daemon.shutdown();

    let mut daemon = Daemon::start(dir.path(), &[]);
    let added = daemon.call("context.expand", expand);
    assert!(
        added["budget_tokens"].as_u64().unwrap() <= quarter,
        "after a restart: {added}"
    );
    daemon.shutdown();
}

/// The exit status of a daemon a `crash` failpoint stopped.
const CRASH_EXIT_STATUS: i32 = 86;

/// Sends an agent loop of `session`, opened by `request`, step by step to `daemon` until a
/// call compacts (`true`) or the daemon dies in the middle of one (`false`); returns the
/// history sent and which.
fn run_until_compaction(daemon: &mut Daemon, session: &str, request: &str) -> (Vec<Value>, bool) {
    let mut messages = vec![system(SYSTEM), user(request)];
    for step in 0..60 {
        messages.extend(agent_step(Format::Openai, &AGENT_LOOP, step));
        let id = daemon.request("context.prepare", json!({"session_id": session, "messages": messages}));
        let reply = loop {
            match daemon.next_frame_within(REPLY_TIMEOUT) {
                Ok((_, frame)) if frame["id"] == json!(id) => break frame,
                Ok(_) => {}
                Err(RecvTimeoutError::Disconnected) => return (messages, false),
                Err(RecvTimeoutError::Timeout) => panic!("no reply within {REPLY_TIMEOUT:?}"),
            }
        };
        assert!(reply.get("error").is_none(), "{reply}");
        if !actions(&reply["result"], "compacted").is_empty() {
            return (messages, true);
        }
    }
    panic!("no compaction in 60 steps");
}

/// Issue 27 item 10: a crash (a failpoint exits the daemon half-way through the archive write)
/// cuts session A's compaction mid-archive; after a restart session B compacts, its lines
/// landing right after A's; then A is loaded and its compaction finished. The runs it records
/// hold only A's lines, and `context.expand` by its id brings back every message it compacted.
#[test]
fn a_compaction_a_crash_cut_mid_archive_expands_after_another_session_archived() {
    const A: &str = "cut-by-a-crash";
    const B: &str = "archived-meanwhile";
    let dir = tempfile::tempdir().unwrap();
    let crashing = [
        SMALL_WINDOW[0],
        SMALL_WINDOW[1],
        ("SATCHEL_FAILPOINTS", "archive:crash@1"),
    ];
    let mut daemon = Daemon::start(dir.path(), &crashing);
    let (messages, answered) = run_until_compaction(&mut daemon, A, "Fix the failing build of the parser crate.");
    assert!(!answered, "the archive write of the compaction crashes the daemon");
    assert_eq!(daemon.wait_exit(REPLY_TIMEOUT).code(), Some(CRASH_EXIT_STATUS));

    // B compacts first after the restart (which cuts the torn line A's write left).
    let mut daemon = Daemon::start(dir.path(), &SMALL_WINDOW);
    let (_, compacted) = run_until_compaction(&mut daemon, B, "Port the lexer to the new token API.");
    assert!(compacted);
    let sessions: Vec<Value> = archive_lines(dir.path())
        .into_iter()
        .map(|(_, _, l)| l["session_id"].clone())
        .collect();
    let whole = sessions.iter().take_while(|s| *s == A).count();
    assert!(
        whole > 0 && sessions[whole] == B,
        "A's first lines, then B's: {sessions:?}"
    );
    daemon.shutdown();

    // A is loaded (by inspect), under the default window its whole span fits in.
    let mut daemon = Daemon::start(dir.path(), &[]);
    let inspected = daemon.call("context.inspect", json!({"session_id": A}));
    let compaction = &inspected["compactions"][0];
    let id = compaction["id"].as_str().unwrap();
    let runs: Vec<&Value> = std::iter::once(&compaction["archive"])
        .chain(compaction["more_archive"].as_array().into_iter().flatten())
        .collect();
    assert_eq!(runs.len(), 2, "A's lines before B's, and the rest after: {compaction}");
    let lines = archive_lines(dir.path());
    for run in &runs {
        let (start, end) = (run["start_line"].as_u64().unwrap(), run["end_line"].as_u64().unwrap());
        let held: Vec<&Value> = lines
            .iter()
            .filter(|(_, n, _)| (start..=end).contains(&(*n as u64)))
            .map(|(_, _, l)| l)
            .collect();
        assert_eq!(held.len() as u64, run["messages"].as_u64().unwrap(), "{run}");
        for line in held {
            assert_eq!(
                (&line["session_id"], &line["compaction_id"]),
                (&json!(A), &json!(id)),
                "{run}"
            );
        }
    }
    assert_eq!(inspected["summary"]["archive"], json!(runs));

    let added = daemon.call("context.expand", json!({"session_id": A, "compaction_id": id}));
    let count = compaction["messages"].as_u64().unwrap() as usize;
    assert_eq!(
        (added["messages"].as_u64(), added["left_out"].as_u64()),
        (Some(count as u64), Some(0)),
        "{added}"
    );
    assert_eq!(added["more_archive"], compaction["more_archive"], "{added}");

    // The next request carries every compacted message, as archived (each once), after the summary.
    let next = daemon.call("context.prepare", json!({"session_id": A, "messages": messages}));
    let sent = next["messages"].as_array().unwrap();
    let archive = archived(dir.path(), A);
    assert_eq!(archive.len(), count);
    let span: Vec<&Value> = archive.values().map(|l| &l["message"]).collect();
    let at = sent.iter().position(|m| m["role"] != "system").unwrap() + 1;
    assert_eq!(sent[at..at + count].iter().collect::<Vec<_>>(), span);
    daemon.shutdown();
}
