//! What inspect tells of a proxied session: the API, what named the session, and the
//! compactions the agent asked its own model for; and Claude Code's tool-less side requests
//! (a session title) kept out of the session they name.

use std::process::Command;

use serde_json::{Value, json};

use super::harness::{Proxy, Reply, SECRET_KEY, Upstream, assert_no_secret, client, workspace};
use crate::support::satchel_bin;

const SESSION: &str = "0b7e4c1a-cc55-4c1e-9d0f-1c2b3a4d5e6f";

/// Claude Code's appended instruction, as it begins.
const CLAUDE_COMPACT: &str = "CRITICAL: Respond with TEXT ONLY. Do NOT call any tools.\n\nYour task is to create a detailed summary of the conversation so far, paying close attention to the user's explicit requests and your previous actions.";

fn tools() -> Value {
    json!([{"name": "Bash", "description": "Run a command", "input_schema": {"type": "object"}}])
}

fn round(id: &str) -> [Value; 2] {
    [
        json!({"role": "assistant", "content": [{"type": "tool_use", "id": id, "name": "Bash", "input": {"command": "ls"}}]}),
        json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": "alpha.txt\nbeta.py"}]}),
    ]
}

/// `satchel inspect SESSION --json` against the running proxy's daemon.
fn inspect(ws: &std::path::Path, session: &str) -> Value {
    let out = Command::new(satchel_bin())
        .arg("--workspace")
        .arg(ws)
        .args(["inspect", session, "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A scripted Anthropic upstream that answers every request with `text`.
fn answering(text: &str) -> Upstream {
    let answer = json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
        "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
        "usage": {"input_tokens": 900, "output_tokens": 9}});
    Upstream::start(move |_| Reply::json(200, &answer))
}

fn send(proxy: &Proxy, body: &Value) -> reqwest::blocking::Response {
    let response = client()
        .post(proxy.url("/v1/messages?beta=true"))
        .header("x-claude-code-session-id", SESSION)
        .header("x-api-key", SECRET_KEY)
        .json(body)
        .send()
        .unwrap();
    assert_eq!(response.status(), 200);
    response
}

#[test]
fn inspect_names_the_session_s_source_and_the_agent_s_own_compactions() {
    let (_dir, ws) = workspace();
    let upstream = answering("<summary>done so far</summary>");
    let proxy = Proxy::start(&ws, &upstream, &[]);

    let mut messages = vec![json!({"role": "user", "content": "list the files"})];
    messages.extend(round("toolu_1"));
    let body =
        |messages: &[Value]| json!({"model": "claude-test", "max_tokens": 64, "tools": tools(), "messages": messages});
    let first = send(&proxy, &body(&messages));
    assert!(first.headers().get("x-satchel-agent-compaction").is_none());
    let shown = inspect(&ws, SESSION);
    assert_eq!(
        shown["origin"],
        json!({"api": "anthropic-messages", "key_from": "x-claude-code-session-id header"})
    );

    // The agent's own compaction: an instruction appended to the last user message. It is
    // prepared like any request and recorded.
    messages.extend(round("toolu_2"));
    let last = messages.last_mut().unwrap();
    last["content"]
        .as_array_mut()
        .unwrap()
        .push(json!({"type": "text", "text": CLAUDE_COMPACT}));
    let compaction = send(&proxy, &body(&messages));
    assert_eq!(compaction.headers()["x-satchel-agent-compaction"], "true");
    assert_eq!(compaction.headers()["x-satchel-session"], SESSION);
    let forwarded = upstream.received().last().unwrap().json();
    let sent_last = forwarded["messages"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(
        sent_last["content"][1]["text"], CLAUDE_COMPACT,
        "the instruction reaches the model"
    );
    let shown = inspect(&ws, SESSION);
    let recorded = shown["origin"]["agent_compactions"].as_array().unwrap();
    assert_eq!(recorded.len(), 1, "{shown}");
    assert_eq!(recorded[0]["messages"], 5);

    // The human view says it too.
    let out = Command::new(satchel_bin())
        .arg("--workspace")
        .arg(&ws)
        .args(["inspect", SESSION])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("proxy    anthropic-messages requests, session named by x-claude-code-session-id header; the agent compacted on its own 1 time"),
        "{text}"
    );
    assert_no_secret(&ws, &proxy);
}

#[test]
fn a_tool_less_side_request_does_not_replace_the_session_it_names() {
    let (_dir, ws) = workspace();
    let upstream = answering("ok");
    let proxy = Proxy::start(&ws, &upstream, &[]);

    let mut messages = vec![json!({"role": "user", "content": "list the files"})];
    messages.extend(round("toolu_1"));
    let main = json!({"model": "claude-test", "max_tokens": 64, "tools": tools(), "messages": messages});
    send(&proxy, &main);
    // Claude Code's title request: no tools, a system prompt and one message of its own.
    let title = json!({"model": "claude-test", "max_tokens": 64, "system": "Generate a concise, sentence-case title",
        "messages": [{"role": "user", "content": "<session>\nlist the files\n</session>"}]});
    let side = send(&proxy, &title);
    assert_eq!(side.headers()["x-satchel-session"], format!("{SESSION}.side"));
    // The main session still holds its three messages: the next request reuses them all.
    messages.extend(round("toolu_2"));
    let next = json!({"model": "claude-test", "max_tokens": 64, "tools": tools(), "messages": messages});
    send(&proxy, &next);
    let shown = inspect(&ws, SESSION);
    assert_eq!(shown["messages"], 5, "{shown}");
    let records = crate::support::checks::session_records(&ws, SESSION);
    assert!(
        !records
            .iter()
            .any(|r| r["record"] == "reset" || r["record"] == "truncate"),
        "the title request never replaced the session's history"
    );
}

/// `satchel inspect --watch` follows a proxied session like any other: it waits for it, and
/// each proxied request is a `prepare` line.
#[test]
fn inspect_watch_follows_a_proxied_session() {
    use std::io::BufRead as _;
    let (_dir, ws) = workspace();
    let upstream = answering("ok");
    let proxy = Proxy::start(&ws, &upstream, &[]);
    let mut watch = Command::new(satchel_bin())
        .arg("--workspace")
        .arg(&ws)
        .args(["inspect", SESSION, "--watch"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, lines) = std::sync::mpsc::channel();
    let stdout = watch.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let next = || {
        lines
            .recv_timeout(crate::support::REPLY_TIMEOUT)
            .expect("a line from inspect --watch")
    };
    assert!(next().starts_with(&format!("waiting for session {SESSION}")));
    let mut messages = vec![json!({"role": "user", "content": "list the files"})];
    messages.extend(round("toolu_1"));
    send(
        &proxy,
        &json!({"model": "claude-test", "max_tokens": 64, "tools": tools(), "messages": messages}),
    );
    let line = next();
    assert!(line.contains("  prepare ") && line.contains(" +3 messages "), "{line}");
    let _ = watch.kill();
    let _ = watch.wait();
}
