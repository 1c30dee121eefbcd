//! "An error reply means the call changed nothing", for every method of the table: refused
//! calls (bad params, unknown ids, out-of-range values) are sent to a daemon between two
//! prepares of a session, and the next `context.prepare`, `context.usage` and
//! `context.inspect` must answer exactly as a control daemon's that never saw them.

use serde_json::{Value, json};

use crate::support::Daemon;
use crate::support::builders::{AgentLoop, SYSTEM, agent_step, system, user};
use crate::support::trajectories::Format;

const SESSION: &str = "refusals";
const ENV: [(&str, &str); 3] = [
    ("SATCHEL_MAX_INPUT_LENGTH", "4096"),
    ("SATCHEL_SUMMARY_MAX_TOKENS", "300"),
    // The workspaces' random names must not show in the notices compared.
    ("SATCHEL_OFFLOAD_NOTICE_PATH", "relative"),
];
const AGENT_LOOP: AgentLoop = AgentLoop {
    check_bytes: 900,
    test_bytes: 1_500,
    runs_tests: |s| s % 4 == 2,
    reply: |s| format!("Module {s} builds now."),
};

/// Refused calls of each method: (method, params). Every method of `initialize` has some.
fn refused_calls() -> Vec<(&'static str, Value)> {
    let s = SESSION;
    vec![
        ("initialize", json!({"capabilities": 42})),
        (
            "context.prepare",
            json!({"session_id": s, "append": [{"role": "bogus", "content": "?"}]}),
        ),
        ("context.prepare", json!({"session_id": s, "append": ["text"]})),
        (
            "context.prepare",
            json!({"session_id": s, "messages": [], "append": []}),
        ),
        (
            "context.prepare",
            json!({"session_id": s, "append": [{"role": "user", "content": "x"}], "expect_messages": 1}),
        ),
        (
            "context.prepare",
            json!({"session_id": s, "append": [{"role": "user", "content": "x"}], "sections": [{"key": "k", "content": "c", "priority": 500}]}),
        ),
        (
            "context.prepare",
            json!({"session_id": s, "append": [{"role": "user", "content": "x"}], "config": {"no_such_key": 1}}),
        ),
        (
            "context.prepare",
            json!({"session_id": s, "append": [{"role": "user", "content": "x"}], "usage": {"input_tokens": 0}}),
        ),
        (
            "context.compact",
            json!({"session_id": s, "config": {"llm_api_key_env": "X"}}),
        ),
        ("context.compact", json!({"session_id": "../escape"})),
        ("context.inspect", json!({"session_id": s, "detail_key": "nope"})),
        ("context.read", json!({"path": "../../etc/passwd"})),
        ("context.read", json!({"path": "tool_result/none.txt", "start_line": 0})),
        ("context.expand", json!({"session_id": s, "compaction_id": "nope"})),
        (
            "context.expand",
            json!({"session_id": s, "archive": {"file": "dialog/x.jsonl", "start_line": 3, "end_line": 1}}),
        ),
        ("context.pin", json!({"session_id": s, "message_index": 999})),
        ("context.pin", json!({"session_id": s, "result_id": "r99"})),
        ("context.pin", json!({"session_id": s, "text": ""})),
        ("context.unpin", json!({"session_id": s, "pin_id": "p99"})),
        ("context.purge", json!({"session_id": s, "result_id": "r99"})),
        ("context.usage", json!({"session_id": s, "input_tokens": 0})),
        ("context.sessions", json!({"bogus": true})),
        ("context.watch", json!({"session_id": "a/b"})),
        ("memory.write", json!({"path": "../outside.md", "content": "x"})),
        ("memory.append", json!({"path": "/etc/x.md", "content": "x"})),
        ("memory.get", json!({"path": "memory/none.md", "start_line": 0})),
        ("memory.search", json!({"query": "x", "max_results": -1})),
        ("memory.merge", json!({"through": "not a date"})),
        ("memory.status", json!({"bogus": true})),
        ("candidates.observe", json!({"text": ""})),
        ("candidates.feedback", json!({"id": "nope", "outcome": "helpful"})),
        ("candidates.list", json!({"state": "bogus"})),
        ("candidates.evaluate", json!({"bogus": true})),
        ("candidates.remove", json!({"id": 5})),
    ]
}

/// A session that compacted once and has offloaded results, sent with a system prompt.
fn history(steps: usize) -> Vec<Value> {
    let mut messages = vec![
        system(SYSTEM),
        user("Fix the failing build of the parser crate. Keep the MSRV at 1.70."),
    ];
    for step in 0..steps {
        messages.extend(agent_step(Format::Openai, &AGENT_LOOP, step));
    }
    messages
}

fn prepare(daemon: &mut Daemon, messages: &[Value]) -> Value {
    daemon.call(
        "context.prepare",
        json!({"session_id": SESSION, "messages": messages, "sections": [
            {"key": "rules", "content": "Run the tests before you commit.", "priority": 80}
        ]}),
    )
}

/// What the client sees after the second prepare: its reply, the usage of it, inspect.
fn observed(daemon: &mut Daemon, messages: &[Value]) -> Value {
    let reply = prepare(daemon, messages);
    let total = reply["tokens"]["total"].as_u64().unwrap();
    let usage = daemon.call(
        "context.usage",
        json!({"session_id": SESSION, "input_tokens": total + 17}),
    );
    let inspect = daemon.call("context.inspect", json!({"session_id": SESSION}));
    let mut seen = json!({"prepare": reply, "usage": usage, "inspect": inspect});
    scrub(&mut seen);
    seen
}

/// Leaves out what two daemons never share: compaction ids (random) and clock readings.
fn scrub(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for key in ["id", "at", "compaction_id"] {
                map.remove(key);
            }
            map.values_mut().for_each(scrub);
        }
        Value::Array(items) => items.iter_mut().for_each(scrub),
        _ => {}
    }
}

#[test]
fn a_refused_call_of_any_method_changes_nothing_a_client_sees() {
    let control_dir = tempfile::tempdir().unwrap();
    let subject_dir = tempfile::tempdir().unwrap();
    let mut control = Daemon::start(control_dir.path(), &ENV);
    let mut subject = Daemon::start(subject_dir.path(), &ENV);

    let methods = subject.call("initialize", json!({}))["methods"].clone();
    let calls = refused_calls();
    for method in methods.as_array().unwrap() {
        assert!(
            calls.iter().any(|(m, _)| m == method),
            "{method} has no refused call here: add one"
        );
    }

    let before = history(16);
    let first = prepare(&mut subject, &before);
    assert!(
        first["compact_summary"].is_object(),
        "the session compacted: {}",
        first["tokens"]
    );
    prepare(&mut control, &before);
    for (method, params) in &calls {
        let error = subject.call_err(method, params.clone());
        // Refused for what it asked: invalid params, a stale or unknown session, a path
        // outside the workspace or not there; never a failure of satchel's own.
        let code = error["code"].as_i64().unwrap();
        assert!(
            [-32602, -32009, -32001, -32002, -32003].contains(&code),
            "{method} {params}: {error}"
        );
    }
    let after = history(18);
    let expected = observed(&mut control, &after);
    let got = observed(&mut subject, &after);
    for part in ["prepare", "usage", "inspect"] {
        let difference = first_difference(&got[part], &expected[part], part);
        assert!(difference.is_none(), "the next {part} differs: {difference:?}");
    }
    control.shutdown();
    subject.shutdown();
}

/// The first place where `got` and `expected` differ, as (path, got, expected).
fn first_difference(got: &Value, expected: &Value, path: &str) -> Option<(String, Value, Value)> {
    match (got, expected) {
        (Value::Object(a), Value::Object(b)) => {
            let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            keys.into_iter().find_map(|k| {
                let (x, y) = (a.get(k).unwrap_or(&Value::Null), b.get(k).unwrap_or(&Value::Null));
                first_difference(x, y, &format!("{path}.{k}"))
            })
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => a
            .iter()
            .zip(b)
            .enumerate()
            .find_map(|(i, (x, y))| first_difference(x, y, &format!("{path}[{i}]"))),
        _ => (got != expected).then(|| (path.to_owned(), got.clone(), expected.clone())),
    }
}
