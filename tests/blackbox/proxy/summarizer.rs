//! `summarizer: "upstream"`: a compaction that a proxied request triggers summarises with the
//! model behind that request's own upstream, with the client's own credentials and the
//! configured model, in the request's API (Anthropic Messages, OpenAI Chat, OpenAI
//! Responses), and the summary it writes reaches the model in the request forwarded next.
//! Any failure of that call (an HTTP error echoing the key, a body that is no reply) gives
//! the extractive summary and the client's request still goes through; the key is in no
//! workspace file and no log line. Over stdio, with no proxied request in flight, a
//! compaction (and the memory merge) is extractive and says why.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::harness::{Proxy, Received, Reply, SECRET_KEY, Upstream, assert_no_secret, client, workspace};
use crate::support::builders::{call_id, result_message, tool_output};
use crate::support::trajectories::Format;
use crate::support::{Daemon, actions, satchel_bin};

/// The session every request names.
const SESSION: &str = "agent-1";
/// Tool calls the scripted agent makes before it answers.
const CALLS: usize = 14;
/// The configured summary models, which tell a summary request from the agent's.
const SUMMARY_MODEL_ANTHROPIC: &str = "haiku-test";
const SUMMARY_MODEL_OPENAI: &str = "mini-test";
/// What the upstream's summary says, to be found in the request forwarded next.
const SUMMARY_MARK: &str = "upstream-summary-5c2";
/// Why `upstream` has no model over stdio.
const NO_UPSTREAM: &str =
    "no proxied request in flight: the upstream summariser uses a request's own upstream, in satchel proxy only";
/// The agent's final answer.
const FINAL: &str = "FINAL: the build is fixed";

/// A valid summary in the sections the summariser's prompt asks for.
fn summary_text() -> String {
    format!(
        "## Goal\n- Fix the build of the workspace ({SUMMARY_MARK})\n\n## Constraints & Preferences\n- (none)\n\n\
         ## Progress\n### Done\n- [x] Ran the builds\n\n### In Progress\n- [ ] Fixing the type error\n\n\
         ### Blocked\n- (none)\n\n## Key Decisions\n- **Fix the types first**: they break every step\n\n\
         ## Next Steps\n1. Build again\n\n## Critical Context\n- (none)\n"
    )
}

/// The configured summary model of `format`'s API.
fn summary_model(format: Format) -> &'static str {
    match format {
        Format::Anthropic => SUMMARY_MODEL_ANTHROPIC,
        Format::Openai | Format::OpenaiResponses => SUMMARY_MODEL_OPENAI,
    }
}

/// The path of `format`'s API.
fn path(format: Format) -> &'static str {
    match format {
        Format::Anthropic => "/v1/messages",
        Format::Openai => "/v1/chat/completions",
        Format::OpenaiResponses => "/v1/responses",
    }
}

/// Whether the upstream got `request` from satchel's summariser (it asks the summary model).
fn is_summary(format: Format, request: &Received) -> bool {
    request.json()["model"] == summary_model(format)
}

/// A reply of `format`'s API whose text is `text`, or whose one tool call is `call` (an id).
fn model_reply(format: Format, text: &str, call: Option<&str>) -> Reply {
    let usage = json!({"input_tokens": 1000, "output_tokens": 9, "prompt_tokens": 1000});
    let body = match (format, call) {
        (Format::Anthropic, None) => json!({"type": "message", "role": "assistant",
            "content": [{"type": "text", "text": text}], "usage": usage}),
        (Format::Anthropic, Some(id)) => json!({"type": "message", "role": "assistant",
            "content": [{"type": "tool_use", "id": id, "name": "bash", "input": {"command": "cargo build"}}], "usage": usage}),
        (Format::Openai, None) => json!({"object": "chat.completion", "usage": usage,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]}),
        (Format::Openai, Some(id)) => json!({"object": "chat.completion", "usage": usage, "choices": [{"index": 0,
            "message": {"role": "assistant", "content": null, "tool_calls": [{"id": id, "type": "function",
                "function": {"name": "bash", "arguments": "{\"command\":\"cargo build\"}"}}]}, "finish_reason": "tool_calls"}]}),
        (Format::OpenaiResponses, None) => json!({"object": "response", "status": "completed", "usage": usage,
            "output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}]}),
        (Format::OpenaiResponses, Some(id)) => json!({"object": "response", "status": "completed", "usage": usage,
            "output": [{"type": "function_call", "call_id": id, "name": "bash", "arguments": "{\"command\":\"cargo build\"}"}]}),
    };
    Reply::json(200, &body)
}

/// The scripted agent: a tool call until the last output answers call `CALLS - 1` (counted
/// from the id of the last output: older ones may have been compacted away), then [`FINAL`].
fn agent(format: Format, request: &Received) -> Reply {
    let body = request.json();
    let last = body[if format == Format::OpenaiResponses {
        "input"
    } else {
        "messages"
    }]
    .as_array()
    .unwrap()
    .last()
    .cloned()
    .unwrap_or_default();
    let answered = [
        &last["tool_call_id"],
        &last["call_id"],
        &last["content"][0]["tool_use_id"],
    ]
    .into_iter()
    .find_map(|id| id.as_str())
    .map_or(0, |id| id.rsplit('_').next().unwrap().parse::<usize>().unwrap() + 1);
    if answered < CALLS {
        model_reply(format, "", Some(&call_id(format, answered)))
    } else {
        model_reply(format, FINAL, None)
    }
}

/// What the client appends of a reply: the assistant's message or items, and whether it
/// called a tool.
fn assistant_part(format: Format, reply: &Value) -> (Vec<Value>, bool) {
    match format {
        Format::Anthropic => (
            vec![json!({"role": "assistant", "content": reply["content"]})],
            reply["content"][0]["type"] == "tool_use",
        ),
        Format::Openai => {
            let message = reply["choices"][0]["message"].clone();
            let called = message["tool_calls"].is_array();
            (vec![message], called)
        }
        Format::OpenaiResponses => {
            let items = reply["output"].as_array().unwrap().clone();
            let called = items.iter().any(|i| i["type"] == "function_call");
            (items, called)
        }
    }
}

/// The agent's request body of `format` with `history`.
fn request_body(format: Format, history: &[Value]) -> Value {
    match format {
        Format::Anthropic => {
            json!({"model": "claude-test", "max_tokens": 1024, "system": "You fix builds.", "messages": history})
        }
        Format::Openai => {
            let mut messages = vec![json!({"role": "system", "content": "You fix builds."})];
            messages.extend_from_slice(history);
            json!({"model": "gpt-test", "messages": messages})
        }
        Format::OpenaiResponses => {
            json!({"model": "gpt-test", "instructions": "You fix builds.", "input": history, "store": false})
        }
    }
}

/// A finished agent run through the proxy with `summarizer: "upstream"` at a small window.
struct Run {
    _dir: tempfile::TempDir,
    ws: std::path::PathBuf,
    upstream: Upstream,
    proxy: Proxy,
    /// Responses whose `X-Satchel-Compacted` was `true`.
    compacted: usize,
}

impl Run {
    /// Every request the upstream received, each marked whether it was a summary request.
    fn received(&self, format: Format) -> Vec<(bool, Received)> {
        let received = self.upstream.received();
        received.into_iter().map(|r| (is_summary(format, &r), r)).collect()
    }

    /// The `summarizer` of each compaction of the session, from `satchel inspect`.
    fn summarizers(&self) -> Vec<String> {
        let inspect = std::process::Command::new(satchel_bin())
            .arg("--workspace")
            .arg(&self.ws)
            .args(["inspect", SESSION, "--json"])
            .output()
            .unwrap();
        assert!(inspect.status.success(), "{}", String::from_utf8_lossy(&inspect.stderr));
        let shown: Value = serde_json::from_slice(&inspect.stdout).unwrap();
        let compactions = shown["compactions"].as_array().unwrap();
        compactions
            .iter()
            .map(|c| c["summarizer"].as_str().unwrap().to_owned())
            .collect()
    }
}

/// Runs the agent in `format` to its final answer through a proxy whose upstream answers
/// summary requests with `summary` and the agent's with [`agent`]; every response is the
/// upstream's 200.
fn run(
    format: Format,
    extra_env: &[(&str, &str)],
    summary: impl Fn(&Received) -> Reply + Send + Sync + 'static,
) -> Run {
    let (_dir, ws) = workspace();
    let upstream = Upstream::start(move |r| {
        if is_summary(format, r) {
            summary(r)
        } else {
            agent(format, r)
        }
    });
    let mut env = vec![
        ("SATCHEL_MAX_INPUT_LENGTH", "8192"),
        ("SATCHEL_PRUNING_RECENT_MSG_MAX_BYTES", "3000"),
        ("SATCHEL_SUMMARIZER", "upstream"),
        ("SATCHEL_SUMMARIZER_UPSTREAM_MODEL_ANTHROPIC", SUMMARY_MODEL_ANTHROPIC),
        ("SATCHEL_SUMMARIZER_UPSTREAM_MODEL_OPENAI", SUMMARY_MODEL_OPENAI),
    ];
    env.extend_from_slice(extra_env);
    let proxy = Proxy::start(&ws, &upstream, &env);
    let http = client();
    let mut history = vec![json!({"role": "user", "content": "Fix the build, please."})];
    if format == Format::OpenaiResponses {
        history[0]["type"] = json!("message");
    }
    let (mut compacted, mut answered) = (0, false);
    for step in 0..=CALLS {
        let mut request = http
            .post(proxy.url(path(format)))
            .header("x-satchel-session", SESSION)
            .json(&request_body(format, &history));
        request = match format {
            Format::Anthropic => request
                .header("x-api-key", SECRET_KEY)
                .header("anthropic-version", "2023-06-01")
                .header("anthropic-beta", "oauth-2025-04-20")
                .header("cookie", "private=1"),
            Format::Openai | Format::OpenaiResponses => request.bearer_auth(SECRET_KEY),
        };
        let response = request.send().unwrap();
        assert_eq!(response.status(), 200, "step {step}");
        assert!(
            response.headers().get("x-satchel-warning").is_none(),
            "step {step} was prepared"
        );
        if response.headers()["x-satchel-compacted"] == "true" {
            compacted += 1;
        }
        let reply: Value = response.json().unwrap();
        let (assistant, called) = assistant_part(format, &reply);
        history.extend(assistant);
        if !called {
            assert!(
                reply.to_string().contains(FINAL) && step == CALLS,
                "step {step}: {reply}"
            );
            answered = true;
            break;
        }
        let output = tool_output(step, 20_000, "src/lib.rs");
        history.push(result_message(format, &call_id(format, step), &output));
    }
    assert!(answered, "the agent gave its final answer");
    assert!(compacted > 0, "a compaction ran at this window");
    Run {
        _dir,
        ws,
        upstream,
        proxy,
        compacted,
    }
}

/// The upstream got a summary request with the client's credentials and the configured
/// model, in the request's own API and without streaming; the summary it wrote is in the
/// next request forwarded, and each compaction names the upstream model.
fn summarises_with_the_requests_own_upstream(format: Format) {
    let run = run(format, &[], move |_| model_reply(format, &summary_text(), None));
    let received = run.received(format);
    let summaries: Vec<&Received> = received.iter().filter(|(s, _)| *s).map(|(_, r)| r).collect();
    assert_eq!(summaries.len(), run.compacted, "one summary request per compaction");
    for request in &summaries {
        assert_eq!(
            (request.method.as_str(), request.target.as_str()),
            ("POST", path(format))
        );
        let body = request.json();
        assert!(body.get("stream").is_none(), "not streamed: {body}");
        match format {
            Format::Anthropic => {
                assert_eq!(request.header("x-api-key"), Some(SECRET_KEY));
                assert_eq!(request.header("anthropic-version"), Some("2023-06-01"));
                assert_eq!(request.header("anthropic-beta"), Some("oauth-2025-04-20"));
                assert_eq!(request.header("cookie"), None, "only credentials are lent");
                assert!(body["system"].is_string(), "{body}");
            }
            Format::Openai => {
                assert_eq!(
                    request.header("authorization"),
                    Some(format!("Bearer {SECRET_KEY}").as_str())
                );
                assert_eq!(body["messages"][0]["role"], "system", "{body}");
            }
            Format::OpenaiResponses => {
                assert_eq!(
                    request.header("authorization"),
                    Some(format!("Bearer {SECRET_KEY}").as_str())
                );
                assert_eq!(body["store"], false, "the provider keeps no copy");
                assert!(body["instructions"].is_string(), "{body}");
            }
        }
        assert!(
            request.text().contains("[step 0] 0001 checking"),
            "the summariser's prompt holds the compacted history"
        );
    }
    let first = received.iter().position(|(s, _)| *s).unwrap();
    let (summary, next) = received[first + 1..]
        .iter()
        .find(|(s, _)| !*s)
        .map(|(s, r)| (*s, r))
        .expect("a request after the compaction");
    assert!(!summary);
    assert!(
        next.text().contains(SUMMARY_MARK),
        "the upstream's summary reaches the model in the next request"
    );
    let model = format!("upstream:{}", summary_model(format));
    assert_eq!(run.summarizers(), vec![model; run.compacted]);
    assert_no_secret(&run.ws, &run.proxy);
}

#[test]
fn an_anthropic_compaction_summarises_with_the_requests_own_upstream_and_key() {
    summarises_with_the_requests_own_upstream(Format::Anthropic);
}

#[test]
fn an_openai_chat_compaction_summarises_with_the_requests_own_upstream_and_key() {
    summarises_with_the_requests_own_upstream(Format::Openai);
}

#[test]
fn a_responses_compaction_summarises_with_the_requests_own_upstream_and_key() {
    summarises_with_the_requests_own_upstream(Format::OpenaiResponses);
}

/// A failed summary call (tried twice) gives the extractive summary, which says why; the
/// agent's requests are all prepared and answered, and the reason, logged, has no key in it
/// although the upstream's error echoed it.
fn falls_back(format: Format, env: &[(&str, &str)], failure: fn() -> Reply, reason: &str) {
    let run = run(format, env, move |_| failure());
    // The upstream records a request once it has answered it: a slow answer comes after
    // the proxy gave up on it.
    let deadline = Instant::now() + Duration::from_secs(10);
    let summaries = loop {
        let summaries = run.received(format).iter().filter(|(s, _)| *s).count();
        if summaries >= 2 * run.compacted || Instant::now() > deadline {
            break summaries;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(summaries, 2 * run.compacted, "each compaction tries twice");
    let summarizers = run.summarizers();
    assert_eq!(summarizers.len(), run.compacted);
    for summarizer in &summarizers {
        assert!(
            summarizer.starts_with("extractive (fallback: ") && summarizer.contains(reason),
            "{summarizer}"
        );
    }
    let log = run.proxy.log_text();
    assert!(
        log.contains("the summariser's model call failed"),
        "the failure is logged"
    );
    assert_no_secret(&run.ws, &run.proxy);
}

#[test]
fn an_upstream_error_on_the_summary_call_falls_back_to_the_extractive_summary() {
    let echo = || {
        let error = json!({"type": "error", "error": {"type": "api_error",
            "message": format!("overloaded (key {SECRET_KEY}, Authorization: Bearer {SECRET_KEY})")}});
        Reply::json(500, &error)
    };
    falls_back(Format::Anthropic, &[], echo, "HTTP 500");
}

#[test]
fn a_summary_reply_that_is_no_reply_falls_back_to_the_extractive_summary() {
    let garbage = || Reply {
        status: 200,
        headers: vec![("content-type".into(), "text/html".into())],
        chunks: vec![b"<html>upstream busy</html>".to_vec()],
        pause: Duration::ZERO,
    };
    falls_back(Format::OpenaiResponses, &[], garbage, "malformed reply");
}

#[test]
fn a_summary_call_past_its_timeout_falls_back_to_the_extractive_summary() {
    let slow = || {
        std::thread::sleep(Duration::from_millis(1500));
        model_reply(Format::Openai, &summary_text(), None)
    };
    falls_back(
        Format::Openai,
        &[("SATCHEL_LLM_TIMEOUT_SECS", "0.3")],
        slow,
        "timed out",
    );
}

/// Over stdio no proxied request is in flight: `upstream` compacts with the extractive
/// summary, and the compaction's report says why.
#[test]
fn over_stdio_the_upstream_summarizer_falls_back_and_says_why() {
    let (_dir, ws) = workspace();
    let env = [
        ("SATCHEL_MAX_INPUT_LENGTH", "8192"),
        ("SATCHEL_PRUNING_RECENT_MSG_MAX_BYTES", "3000"),
    ];
    let mut daemon = Daemon::start(&ws, &env);
    let mut messages = vec![json!({"role": "user", "content": "Fix the build, please."})];
    let mut reports = Vec::new();
    for step in 0..CALLS {
        let id = call_id(Format::Openai, step);
        messages.push(
            json!({"role": "assistant", "content": null, "tool_calls": [{"id": id, "type": "function",
            "function": {"name": "bash", "arguments": "{\"command\":\"cargo build\"}"}}]}),
        );
        messages.push(result_message(
            Format::Openai,
            &id,
            &tool_output(step, 20_000, "src/lib.rs"),
        ));
        let params = json!({"session_id": SESSION, "messages": messages, "config": {"summarizer": "upstream"}});
        let result = daemon.call("context.prepare", params);
        reports.extend(actions(&result, "compacted").into_iter().cloned());
    }
    assert!(!reports.is_empty(), "a compaction ran at this window");
    for report in reports {
        assert_eq!(report["summarizer"], format!("extractive (fallback: {NO_UPSTREAM})"));
    }
    daemon.shutdown();

    // The memory merge, too, has no request to borrow from.
    let env = [("SATCHEL_SUMMARIZER", "upstream")];
    let mut daemon = Daemon::start(&ws, &env);
    let log = "### Decisions\n\n- Vectors stay brute force below 100k chunks.\n";
    daemon.call("memory.write", json!({"path": "memory/2026-11-24.md", "content": log}));
    let merged = daemon.call("memory.merge", json!({"through": "2026-11-24"}));
    assert_eq!(merged["summarizer"], "extractive", "{merged}");
    assert!(
        merged["warnings"][0].as_str().unwrap().contains(NO_UPSTREAM),
        "{merged}"
    );
    daemon.shutdown();
}
