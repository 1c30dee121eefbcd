//! Black-box tests of `satchel proxy`: the real binary between a client speaking a provider's
//! API (Anthropic Messages, OpenAI Chat; OpenAI Responses in `responses`) and a scripted model server on loopback (written here, `proxy/harness.rs`) that records
//! what it receives. What is checked is what an agent relies on: here, a tool loop in
//! Anthropic Messages and in OpenAI Chat whose large tool outputs reach the model cut and
//! compacted, with every call paired and every other field forwarded byte for byte, while the
//! workspace keeps the originals and the usage calibrates the session; in `passthrough`,
//! streams relayed byte for byte as they arrive, the upstream's errors, other paths and
//! credentials passed through untouched, a malformed body answered in the provider's own
//! error shape, a request satchel cannot prepare forwarded as sent with a warning, and the
//! proxy's own token; in `summarizer`, a compaction summarised by the request's own upstream
//! with the client's key (`summarizer: "upstream"`); in `replay`, an agent's loop and the
//! shared trajectories replayed in the three formats through the proxy and, beside it,
//! through `context.prepare` over stdio give the upstream exactly the prepared requests, step
//! by step, through compactions; in `first_byte`, a stream's first event is not held back.
//! Every other test also finds the client's key in no workspace file and no log.
//!
//! The official SDKs (Python `anthropic` and `openai`, Node `openai`) go through the proxy in
//! `tests/sdk`; Claude Code and Codex end to end in `agents` (which uses this harness).

mod first_byte;
pub mod harness;
mod origin;
mod passthrough;
mod replay;
mod responses;
mod summarizer;

use std::path::Path;

use serde_json::{Value, json};

use crate::support::builders::tool_output;
use crate::support::{Daemon, MARKER, SocketClient, archived, wait_for_path};
use harness::{
    Proxy, Received, Reply, SECRET_KEY, Upstream, assert_no_secret, calibrated, client, workspace, workspace_holds,
};

/// Input tokens the scripted upstream reports for every request.
pub const REPORTED_INPUT: u64 = 4321;
/// Tool calls the scripted model makes before it answers.
const TOOL_CALLS: usize = 3;
/// Bytes of each tool output: over the default recent limit (50 000), so it is cut.
const OUTPUT_BYTES: usize = 90_000;

/// The scripted Anthropic model: a `tool_use` until the conversation holds [`TOOL_CALLS`]
/// results, then a final text.
fn anthropic_model(request: &Received) -> Reply {
    let body = request.json();
    let results = body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .filter(|b| b["type"] == "tool_result")
        .count();
    let content = if results < TOOL_CALLS {
        json!([{"type": "tool_use", "id": format!("toolu_{results}"), "name": "Bash", "input": {"command": format!("cargo build -p step{results}")}}])
    } else {
        json!([{"type": "text", "text": "FINAL: the build is fixed"}])
    };
    let usage = json!({"input_tokens": REPORTED_INPUT - 100, "cache_read_input_tokens": 100, "output_tokens": 12});
    Reply::json(
        200,
        &json!({"id": "msg_1", "type": "message", "role": "assistant", "content": content, "usage": usage}),
    )
}

/// The scripted OpenAI Chat model, the same loop with `tool_calls`, until `calls` results
/// (counted from the id of the last one: older ones may have been compacted away).
fn openai_model(request: &Received, calls: usize) -> Reply {
    let body = request.json();
    let last = body["messages"].as_array().unwrap().last().cloned().unwrap_or_default();
    let results = match last["tool_call_id"].as_str() {
        Some(id) => id.trim_start_matches("call_").parse::<usize>().unwrap() + 1,
        None => 0,
    };
    let message = if results < calls {
        json!({"role": "assistant", "content": null, "tool_calls": [{"id": format!("call_{results}"), "type": "function",
            "function": {"name": "bash", "arguments": format!("{{\"command\":\"cargo build -p step{results}\"}}")}}]})
    } else {
        json!({"role": "assistant", "content": "FINAL: the build is fixed"})
    };
    let usage = json!({"prompt_tokens": REPORTED_INPUT, "completion_tokens": 9, "total_tokens": REPORTED_INPUT + 9});
    Reply::json(
        200,
        &json!({"id": "chatcmpl-1", "object": "chat.completion", "choices": [{"index": 0, "message": message, "finish_reason": "stop"}], "usage": usage}),
    )
}

/// An Anthropic body with `messages` spliced in, its other fields written as a client wrote
/// them (a number as `1e1`, `cache_control`, `thinking`, Claude Code's `metadata`).
fn anthropic_body(messages: &Value) -> String {
    let user_id = r#"{\"device_id\":\"dev\",\"account_uuid\":\"\",\"session_id\":\"cc-session-1\"}"#;
    format!(
        r#"{{"model":"claude-test","max_tokens":1024,"top_k":1e1,"system":[{{"type":"text","text":"You fix builds.","cache_control":{{"type":"ephemeral"}}}}],"tools":[{{"name":"Bash","description":"run","input_schema":{{"type":"object"}}}}],"thinking":{{"type":"adaptive"}},"context_management":{{"edits":[{{"type":"clear_thinking_20251015","keep":"all"}}]}},"metadata":{{"user_id":"{user_id}"}},"messages":{messages}}}"#
    )
}

/// Every `tool_use` of an assistant message is answered in the next message, and every
/// `tool_result` answers the message before it.
fn assert_anthropic_pairs(messages: &[Value]) {
    let ids = |m: &Value, kind: &str, key: &str| -> Vec<String> {
        m["content"]
            .as_array()
            .map(|blocks| {
                blocks
                    .iter()
                    .filter(|b| b["type"] == kind)
                    .map(|b| b[key].as_str().unwrap().to_owned())
                    .collect()
            })
            .unwrap_or_default()
    };
    for (i, m) in messages.iter().enumerate() {
        let calls = ids(m, "tool_use", "id");
        let answered = messages
            .get(i + 1)
            .map(|n| ids(n, "tool_result", "tool_use_id"))
            .unwrap_or_default();
        assert_eq!(calls, answered, "message {i}'s calls and the next message's results");
        if i > 0 {
            let results = ids(m, "tool_result", "tool_use_id");
            assert_eq!(
                results,
                ids(&messages[i - 1], "tool_use", "id"),
                "message {i}'s results"
            );
        }
    }
}

/// The body without `messages`, to compare the fields the proxy must not touch.
fn without_messages(body: &Value) -> Value {
    let mut body = body.clone();
    body.as_object_mut().unwrap().remove("messages");
    body
}

/// Whether the socket's `context.sessions` lists `session`.
pub fn sessions_list(ws: &Path, session: &str) -> bool {
    let mut conn = SocketClient::connect(&ws.join("run").join("satchel.sock"));
    let listed = conn.call("context.sessions", json!({}));
    listed["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .any(|s| s["session_id"] == session)
}

#[test]
fn an_anthropic_tool_loop_reaches_the_model_cut_and_paired_and_the_workspace_keeps_the_originals() {
    let (_dir, ws) = workspace();
    let upstream = Upstream::start(anthropic_model);
    let proxy = Proxy::start(&ws, &upstream, &[]);
    let http = client();
    let mut messages = vec![json!({"role": "user", "content": "Fix the build, please."})];
    let mut outputs = Vec::new();
    let final_text = loop {
        let body = anthropic_body(&Value::Array(messages.clone()));
        let response = http
            .post(proxy.url("/v1/messages?beta=true"))
            .header("x-api-key", SECRET_KEY)
            .header("anthropic-version", "2023-06-01")
            .header("x-claude-code-session-id", "cc-session-1")
            .header("content-type", "application/json")
            .body(body)
            .send()
            .unwrap();
        assert_eq!(response.status(), 200);
        let header = |name: &str| response.headers()[name].to_str().unwrap().to_owned();
        assert_eq!(header("x-satchel-session"), "cc-session-1");
        let (before, after) = header("x-satchel-tokens")
            .split_once("->")
            .map(|(a, b)| (a.parse::<u64>().unwrap(), b.parse::<u64>().unwrap()))
            .unwrap();
        assert!(after > 0 && before >= after);
        assert_eq!(header("x-satchel-compacted"), "false");
        let reply: Value = response.json().unwrap();
        assert_eq!(
            reply["usage"]["input_tokens"],
            REPORTED_INPUT - 100,
            "the usage reaches the client unchanged"
        );
        let content = reply["content"].clone();
        if content[0]["type"] == "text" {
            break content[0]["text"].as_str().unwrap().to_owned();
        }
        let id = content[0]["id"].as_str().unwrap().to_owned();
        let output = tool_output(outputs.len(), OUTPUT_BYTES, "src/lib.rs");
        messages.push(json!({"role": "assistant", "content": content}));
        messages
            .push(json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": output}]}));
        outputs.push(output);
    };
    assert_eq!(final_text, "FINAL: the build is fixed");

    let received = upstream.received();
    assert_eq!(received.len(), TOOL_CALLS + 1);
    for (i, request) in received.iter().enumerate() {
        assert_eq!(
            (request.method.as_str(), request.target.as_str()),
            ("POST", "/v1/messages?beta=true")
        );
        assert_eq!(request.header("x-api-key"), Some(SECRET_KEY));
        assert_eq!(request.header("anthropic-version"), Some("2023-06-01"));
        let text = request.text();
        assert!(
            text.contains(r#""top_k":1e1"#),
            "request {i}: a field was rewritten: {}",
            &text[..200]
        );
        let sent: Value = serde_json::from_str(&anthropic_body(&json!([]))).unwrap();
        assert_eq!(
            without_messages(&request.json()),
            without_messages(&sent),
            "request {i}: fields besides messages"
        );
        let upstream_messages = request.json()["messages"].as_array().unwrap().clone();
        assert_anthropic_pairs(&upstream_messages);
        assert!(
            !text.contains(&outputs.last().unwrap()[..]),
            "request {i} carries a whole output"
        );
    }
    let last = received.last().unwrap().json();
    let results: Vec<&Value> = last["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["content"].as_array())
        .flatten()
        .filter(|b| b["type"] == "tool_result")
        .collect();
    assert_eq!(results.len(), TOOL_CALLS);
    for result in results {
        let text = result["content"]
            .as_str()
            .map(str::to_owned)
            .unwrap_or_else(|| result["content"][0]["text"].as_str().unwrap().to_owned());
        assert!(
            text.contains(MARKER) && text.len() < OUTPUT_BYTES,
            "a cut output: {} bytes",
            text.len()
        );
    }
    for output in &outputs {
        assert!(
            workspace_holds(&ws, output),
            "the workspace keeps every original output"
        );
    }
    assert!(
        sessions_list(&ws, "cc-session-1"),
        "context.sessions lists the proxied session"
    );
    let inspect = std::process::Command::new(crate::support::satchel_bin())
        .arg("--workspace")
        .arg(&ws)
        .args(["inspect", "cc-session-1", "--json"])
        .output()
        .unwrap();
    assert!(inspect.status.success(), "{}", String::from_utf8_lossy(&inspect.stderr));
    let shown: Value = serde_json::from_slice(&inspect.stdout).unwrap();
    assert_eq!(
        shown["session_id"], "cc-session-1",
        "satchel inspect shows the proxied session"
    );
    assert_eq!(
        calibrated(&ws, "cc-session-1"),
        REPORTED_INPUT,
        "the usage calibrates the session"
    );
    assert_no_secret(&ws, &proxy);
}

/// An OpenAI Chat agent at a small window: its outputs are cut, the older turns compacted,
/// and what the model gets is always within the window, paired, under the session of its
/// `prompt_cache_key`; the archive holds every compacted message as sent.
#[test]
fn an_openai_chat_tool_loop_is_cut_and_compacted_and_the_archive_keeps_the_originals() {
    const CALLS: usize = 8;
    let (_dir, ws) = workspace();
    let upstream = Upstream::start(|r| openai_model(r, CALLS));
    let env = [
        ("SATCHEL_MAX_INPUT_LENGTH", "8192"),
        ("SATCHEL_PRUNING_RECENT_MSG_MAX_BYTES", "3000"),
    ];
    let proxy = Proxy::start(&ws, &upstream, &env);
    let http = client();
    let mut messages = vec![
        json!({"role": "system", "content": "You fix builds."}),
        json!({"role": "user", "content": "Fix the build, please."}),
    ];
    let mut compacted = 0;
    let mut outputs = Vec::new();
    loop {
        let body = json!({"model": "gpt-test", "messages": messages, "tools": [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}], "prompt_cache_key": "thread-42", "temperature": 0});
        let response = http
            .post(proxy.url("/v1/chat/completions"))
            .bearer_auth(SECRET_KEY)
            .json(&body)
            .send()
            .unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["x-satchel-session"], "thread-42");
        if response.headers()["x-satchel-compacted"] == "true" {
            compacted += 1;
        }
        let reply: Value = response.json().unwrap();
        assert_eq!(reply["usage"]["prompt_tokens"], REPORTED_INPUT);
        let message = reply["choices"][0]["message"].clone();
        let Some(calls) = message["tool_calls"].as_array().cloned() else {
            assert_eq!(message["content"], "FINAL: the build is fixed");
            break;
        };
        messages.push(message);
        let output = tool_output(outputs.len(), 20_000, "src/lib.rs");
        messages.push(json!({"role": "tool", "tool_call_id": calls[0]["id"], "content": output}));
        outputs.push(output);
    }
    assert!(compacted > 0, "a compaction ran at this window");
    let received = upstream.received();
    assert_eq!(received.len(), CALLS + 1);
    for request in &received {
        assert_eq!(
            request.header("authorization"),
            Some(format!("Bearer {SECRET_KEY}").as_str())
        );
        let body = request.json();
        assert_eq!(
            (body["prompt_cache_key"].clone(), body["temperature"].clone()),
            (json!("thread-42"), json!(0))
        );
        let sent = body["messages"].as_array().unwrap();
        assert!(
            request.body.len() < 8192 * 4 + 4000,
            "a request of {} bytes at a window of 8192 tokens",
            request.body.len()
        );
        for (i, m) in sent.iter().enumerate() {
            for call in m["tool_calls"].as_array().into_iter().flatten() {
                assert_eq!(sent[i + 1]["tool_call_id"], call["id"], "each call is answered next");
            }
            if m["role"] == "tool" {
                assert_eq!(
                    sent[i - 1]["tool_calls"][0]["id"],
                    m["tool_call_id"],
                    "each result follows its call"
                );
            }
        }
    }
    let archive = archived(&ws, "thread-42");
    assert!(!archive.is_empty(), "compacted messages are archived");
    for (index, line) in &archive {
        assert_eq!(
            line["message"], messages[*index],
            "archived message {index} is the one sent"
        );
    }
    for output in &outputs {
        assert!(
            workspace_holds(&ws, output),
            "the workspace keeps every original output"
        );
    }
    assert!(sessions_list(&ws, "thread-42"));
    assert_eq!(calibrated(&ws, "thread-42"), REPORTED_INPUT);
    assert_no_secret(&ws, &proxy);
}

/// `serve --proxy` serves the proxy beside stdio on one engine: a proxied session is listed
/// by `context.sessions` on stdio at once.
#[test]
fn serve_with_a_proxy_shares_its_engine_with_stdio() {
    let (_dir, ws) = workspace();
    let upstream = Upstream::start(|r| openai_model(r, 0));
    let env = [("SATCHEL_PROXY_UPSTREAM_OPENAI", upstream.url.as_str())];
    let mut daemon = Daemon::start_with_args(&ws, &env, &["--proxy", "127.0.0.1:0"]);
    let info = ws.join("run").join("proxy.json");
    wait_for_path(&info);
    let addr = loop {
        if let Ok(info) = serde_json::from_str::<Value>(&std::fs::read_to_string(&info).unwrap_or_default()) {
            break info["listen"].as_str().unwrap().to_owned();
        }
    };
    let body = json!({"model": "m", "user": "agent-7", "messages": [{"role": "user", "content": "hi"}]});
    let response = client()
        .post(format!("http://{addr}/v1/chat/completions"))
        .json(&body)
        .send()
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-satchel-session"], "agent-7");
    let listed = daemon.call("context.sessions", json!({}));
    assert!(
        listed["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["session_id"] == "agent-7"),
        "{listed}"
    );
    daemon.shutdown();
    assert!(!info.exists(), "run/proxy.json leaves with the daemon");
}
