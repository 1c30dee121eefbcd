//! The OpenAI Responses API through the proxy (`POST /v1/responses`), the way Codex speaks
//! it: `instructions`, a `developer` message, `function_call` / `function_call_output` items
//! paired by `call_id`, signed `reasoning` items before each call, `store: false` and a
//! `prompt_cache_key`. A tool loop at a small window reaches the model cut and compacted,
//! every call answered and every reasoning item still right before its call, while the
//! workspace keeps the originals and the reported usage calibrates the session.

use serde_json::{Value, json};

use super::harness::{
    Proxy, Received, Reply, SECRET_KEY, Upstream, assert_no_secret, calibrated, client, workspace, workspace_holds,
};
use super::{REPORTED_INPUT, sessions_list};
use crate::support::archived;
use crate::support::builders::tool_output;

/// The scripted Responses model: a reasoning item and a `function_call` until `calls`
/// outputs (counted from the `call_id` of the last one: older ones may have been compacted
/// away), then a final message.
fn responses_model(request: &Received, calls: usize) -> Reply {
    let body = request.json();
    let last = body["input"].as_array().unwrap().last().cloned().unwrap_or_default();
    let outputs = match last["call_id"].as_str() {
        Some(id) if last["type"] == "function_call_output" => {
            id.trim_start_matches("call_").parse::<usize>().unwrap() + 1
        }
        _ => 0,
    };
    let output = if outputs < calls {
        json!([
            {"type": "reasoning", "id": format!("rs_{outputs}"), "summary": [], "encrypted_content": format!("gAAAA{outputs}signed")},
            {"type": "function_call", "id": format!("fc_{outputs}"), "call_id": format!("call_{outputs}"), "name": "shell",
             "arguments": format!("{{\"command\":[\"cargo\",\"build\",\"-p\",\"step{outputs}\"]}}")},
        ])
    } else {
        json!([{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "FINAL: the build is fixed"}]}])
    };
    let usage =
        json!({"input_tokens": REPORTED_INPUT, "input_tokens_details": {"cached_tokens": 1000}, "output_tokens": 9});
    Reply::json(
        200,
        &json!({"id": "resp_1", "object": "response", "status": "completed", "output": output, "usage": usage}),
    )
}

#[test]
fn a_responses_tool_loop_is_cut_and_compacted_with_reasoning_kept_before_its_call() {
    const CALLS: usize = 8;
    let (_dir, ws) = workspace();
    let upstream = Upstream::start(|r| responses_model(r, CALLS));
    let env = [
        ("SATCHEL_MAX_INPUT_LENGTH", "8192"),
        ("SATCHEL_PRUNING_RECENT_MSG_MAX_BYTES", "3000"),
    ];
    let proxy = Proxy::start(&ws, &upstream, &env);
    let http = client();
    let instructions = "You are Codex, a coding agent. Fix builds.";
    let mut input = vec![
        json!({"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "<permissions>sandboxed</permissions>"}]}),
        json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Fix the build, please."}]}),
    ];
    let (mut compacted, mut outputs) = (0, Vec::new());
    loop {
        let body = json!({"model": "gpt-test", "instructions": instructions, "input": input, "tools": [{"type": "function", "name": "shell", "parameters": {"type": "object"}}],
            "store": false, "stream": false, "prompt_cache_key": "codex-7", "include": ["reasoning.encrypted_content"]});
        let response = http
            .post(proxy.url("/v1/responses"))
            .bearer_auth(SECRET_KEY)
            .json(&body)
            .send()
            .unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["x-satchel-session"], "codex-7");
        if response.headers()["x-satchel-compacted"] == "true" {
            compacted += 1;
        }
        let reply: Value = response.json().unwrap();
        assert_eq!(
            reply["usage"]["input_tokens"], REPORTED_INPUT,
            "the usage as the upstream sent it"
        );
        let items = reply["output"].as_array().unwrap().clone();
        let Some(call) = items.iter().find(|i| i["type"] == "function_call").cloned() else {
            assert_eq!(items[0]["content"][0]["text"], "FINAL: the build is fixed");
            break;
        };
        input.extend(items);
        let output = tool_output(outputs.len(), 20_000, "src/lib.rs");
        input.push(json!({"type": "function_call_output", "call_id": call["call_id"], "output": output}));
        outputs.push(output);
    }
    assert!(compacted > 0, "a compaction ran at this window");
    let received = upstream.received();
    assert_eq!(received.len(), CALLS + 1);
    for request in &received {
        assert_eq!(request.target, "/v1/responses");
        assert_eq!(
            request.header("authorization"),
            Some(format!("Bearer {SECRET_KEY}").as_str())
        );
        let body = request.json();
        assert_eq!(body["instructions"], instructions, "the instructions as sent");
        assert_eq!(
            (body["store"].clone(), body["prompt_cache_key"].clone()),
            (json!(false), json!("codex-7"))
        );
        assert!(
            request.body.len() < 8192 * 4 + 4000,
            "a request of {} bytes at a window of 8192 tokens",
            request.body.len()
        );
        let sent = body["input"].as_array().unwrap();
        assert_eq!(sent[0]["role"], "developer", "the developer message stays first");
        for (i, item) in sent.iter().enumerate() {
            match item["type"].as_str() {
                Some("reasoning") => {
                    assert_eq!(
                        sent[i + 1]["type"],
                        "function_call",
                        "reasoning stays right before its call"
                    );
                    assert!(
                        item["encrypted_content"].as_str().unwrap().ends_with("signed"),
                        "signed content untouched"
                    );
                }
                Some("function_call") => {
                    let answered = sent[i + 1..]
                        .iter()
                        .any(|o| o["type"] == "function_call_output" && o["call_id"] == item["call_id"]);
                    assert!(answered, "call {} is answered", item["call_id"]);
                }
                Some("function_call_output") => {
                    let asked = sent[..i]
                        .iter()
                        .any(|c| c["type"] == "function_call" && c["call_id"] == item["call_id"]);
                    assert!(asked, "output {} follows its call", item["call_id"]);
                }
                _ => {}
            }
        }
    }
    let archive = archived(&ws, "codex-7");
    assert!(!archive.is_empty(), "compacted items are archived");
    for (index, line) in &archive {
        assert_eq!(line["message"], input[*index], "archived item {index} is the one sent");
    }
    for output in &outputs {
        assert!(
            workspace_holds(&ws, output),
            "the workspace keeps every original output"
        );
    }
    assert!(sessions_list(&ws, "codex-7"));
    assert_eq!(calibrated(&ws, "codex-7"), REPORTED_INPUT);
    assert_no_secret(&ws, &proxy);
}

/// A Responses request that continues a stored response (`previous_response_id`) or sends
/// one text as `input` carries no history to manage: it goes through as sent.
#[test]
fn a_responses_request_without_history_passes_through_as_sent() {
    let (_dir, ws) = workspace();
    let echo = |request: &Received| Reply::json(200, &json!({"echo": request.target}));
    let upstream = Upstream::start(echo);
    let proxy = Proxy::start(&ws, &upstream, &[]);
    let bodies = [
        r#"{"model":"m","input":[{"type":"function_call_output","call_id":"c1","output":"ok"}],"previous_response_id":"resp_1"}"#,
        r#"{"model":"m","input":"Say hi.","store":true}"#,
    ];
    for body in bodies {
        let response = client()
            .post(proxy.url("/v1/responses"))
            .bearer_auth(SECRET_KEY)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .unwrap();
        assert_eq!(response.status(), 200);
        assert!(response.headers().get("x-satchel-session").is_none(), "not managed");
    }
    let received = upstream.received();
    assert_eq!(received.len(), 2);
    for (got, body) in received.iter().zip(bodies) {
        assert_eq!(got.body, body.as_bytes(), "the body as sent");
    }
    let log = proxy.log_text();
    assert!(log.contains("previous_response_id"), "the reason is logged: {log}");
    assert!(log.contains("one text"), "the reason is logged: {log}");
    assert_no_secret(&ws, &proxy);
}
