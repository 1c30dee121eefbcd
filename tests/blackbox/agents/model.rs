//! The scripted model both agents talk to (through the proxy): it runs [`STEPS`] shell
//! commands, one per turn, then answers [`FINAL_ANSWER`]. Which step comes next is read from
//! the request alone (the newest tool result's call id, or the step our own summary names
//! after the agent compacted), so a request the proxy compacted is answered like any other.
//! It answers an agent's own compaction request with a summary, reports usage as
//! body bytes / 4 (so the agent's gauge sees what was really sent), and streams every answer
//! as the provider does: Anthropic Messages events, or OpenAI Responses events.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

use crate::proxy::harness::{Received, Reply};

/// Tool calls in a session (the acceptance asks for 40 or more).
pub const STEPS: usize = 42;
/// The agent's final answer, which it must print.
pub const FINAL_ANSWER: &str = "AGENT-FINAL: all 42 commands ran";
/// The words a summary of ours ends with, naming the next step.
const NEXT_STEP: &str = "NEXT-STEP: ";

/// The models satchel's upstream summariser is configured with, which tell its summary
/// calls from the agent's requests.
pub const SUMMARY_MODEL_ANTHROPIC: &str = "claude-summary-scripted";
pub const SUMMARY_MODEL_OPENAI: &str = "gpt-summary-scripted";
/// A mark in the summary the model writes for satchel, to be found in the agent's requests.
pub const SUMMARY_MARK: &str = "model-written-summary-7e1";

/// Whether satchel's upstream summariser sent `request` (it asks a summary model).
pub fn is_summary_call(request: &Received) -> bool {
    let model = &request.json()["model"];
    model == SUMMARY_MODEL_ANTHROPIC || model == SUMMARY_MODEL_OPENAI
}

/// The summary the model writes for satchel, in the sections satchel's prompt asks for.
fn summary_for_satchel() -> String {
    format!(
        "## Goal\n- Run the shell commands of the task, one per turn ({SUMMARY_MARK})\n\n\
         ## Constraints & Preferences\n- (none)\n\n## Progress\n### Done\n- [x] The first commands\n\n\
         ### In Progress\n- [ ] The next command\n\n### Blocked\n- (none)\n\n## Key Decisions\n- (none)\n\n\
         ## Next Steps\n1. Run the next command\n\n## Critical Context\n- (none)\n"
    )
}

/// The answer to a summary call (not streamed: satchel asks for one JSON reply), in the
/// call's API.
pub fn summary_reply(request: &Received) -> Reply {
    let text = summary_for_satchel();
    let body = if request.json()["model"] == SUMMARY_MODEL_ANTHROPIC {
        json!({"id": response_id("msg"), "type": "message", "role": "assistant", "model": SUMMARY_MODEL_ANTHROPIC,
            "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
            "usage": {"input_tokens": reported_tokens(request), "output_tokens": 120}})
    } else {
        json!({"id": response_id("resp"), "object": "response", "status": "completed", "model": SUMMARY_MODEL_OPENAI,
            "output": [{"type": "message", "id": response_id("msg"), "role": "assistant", "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}]}],
            "usage": {"input_tokens": reported_tokens(request), "output_tokens": 120, "total_tokens": reported_tokens(request) + 120}})
    };
    Reply::json(200, &body)
}

/// The first and last line step `n`'s output prints. The command computes them
/// (`$((50000+n))`), so they are in the output only, never in the call that asked for it.
pub fn markers(n: usize) -> [String; 2] {
    [format!("mark-{}-begin", 50_000 + n), format!("mark-{}-end", 50_000 + n)]
}

/// Step `n`'s shell command. Every third command prints a large output: 20 000 numbered
/// lines (109 KB) or 60 KB of random bytes in base64 (81 KB), over every limit satchel has
/// (and within what the agents pass on inline: Claude Code's `bashOutputMaxChars` at most
/// 128 000).
pub fn command(n: usize) -> String {
    let body = match n % 6 {
        2 => "seq 1 20000",
        5 => "head -c 60000 /dev/urandom | base64",
        _ => "ls -1",
    };
    format!("echo mark-$((50000+{n}))-begin; {body}; echo mark-$((50000+{n}))-end")
}

/// Whether step `n` also sends a thinking block (Anthropic) or a reasoning item (Responses),
/// which the agent echoes back signed, for satchel to leave untouched.
pub fn thinks(n: usize) -> bool {
    n % 4 == 1
}

/// Step `n`'s thinking text and its signature (or encrypted reasoning).
pub fn thought(n: usize) -> (String, String) {
    (
        format!("Step {n} comes next; the command's output will tell."),
        format!("c2lnbmF0dXJl-step-{n}-{}", "Zm9v".repeat(16)),
    )
}

/// The step the model takes next: after the newest tool result whose call id is
/// `<prefix><n>`, or the step a summary of ours names, whichever is later.
pub fn next_step(results: impl Iterator<Item = String>, prefix: &str, body: &str) -> usize {
    let by_result = results
        .filter_map(|id| id.strip_prefix(prefix)?.parse::<usize>().ok())
        .map(|n| n + 1)
        .max();
    let by_summary = body
        .match_indices(NEXT_STEP)
        .filter_map(|(at, _)| {
            let digits: String = body[at + NEXT_STEP.len()..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            digits.parse::<usize>().ok()
        })
        .max();
    by_result.max(by_summary).unwrap_or(0)
}

/// The summary answering an agent's own compaction request.
pub fn summary(next: usize) -> String {
    format!(
        "<summary>The user asked for {STEPS} shell commands, one per turn. {next} have run. {NEXT_STEP}{next}</summary>"
    )
}

/// Input tokens to report for a request: its bytes / 4, as satchel's estimate reckons.
pub fn reported_tokens(request: &Received) -> u64 {
    request.body.len() as u64 / 4
}

/// A new id for a response: Claude Code merges the streamed blocks of one message id into
/// one assistant message, so every answer needs its own, as a real model's has.
fn response_id(prefix: &str) -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    format!("{prefix}_scripted_{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// One server-sent event.
fn event(name: &str, data: &Value) -> String {
    format!("event: {name}\ndata: {data}\n\n")
}

fn stream(events: Vec<String>) -> Reply {
    Reply::stream(&events, Duration::ZERO)
}

/// What the model says in one turn.
pub enum Turn {
    /// A shell command (step `n`).
    Call(usize),
    /// A text: the final answer or a summary.
    Text(String),
}

/// An Anthropic Messages stream: an optional thinking block, a text, and the call.
pub fn anthropic_stream(turn: &Turn, input_tokens: u64) -> Reply {
    let mut blocks: Vec<(Value, Vec<Value>)> = Vec::new();
    let stop = match turn {
        Turn::Call(n) => {
            if thinks(*n) {
                let (thinking, signature) = thought(*n);
                blocks.push((
                    json!({"type": "thinking", "thinking": "", "signature": ""}),
                    vec![
                        json!({"type": "thinking_delta", "thinking": thinking}),
                        json!({"type": "signature_delta", "signature": signature}),
                    ],
                ));
            }
            blocks.push((
                json!({"type": "text", "text": ""}),
                vec![json!({"type": "text_delta", "text": format!("Running step {n}.")})],
            ));
            let input = json!({"command": command(*n), "description": format!("Step {n}")});
            blocks.push((
                json!({"type": "tool_use", "id": format!("toolu_step_{n}"), "name": "Bash", "input": {}}),
                vec![json!({"type": "input_json_delta", "partial_json": input.to_string()})],
            ));
            "tool_use"
        }
        Turn::Text(text) => {
            blocks.push((
                json!({"type": "text", "text": ""}),
                vec![json!({"type": "text_delta", "text": text})],
            ));
            "end_turn"
        }
    };
    let usage = json!({"input_tokens": input_tokens, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 1});
    let mut events = vec![event(
        "message_start",
        &json!({"type": "message_start", "message": {"id": response_id("msg"), "type": "message", "role": "assistant",
            "model": "claude-scripted", "content": [], "stop_reason": null, "stop_sequence": null, "usage": usage}}),
    )];
    for (index, (start, deltas)) in blocks.into_iter().enumerate() {
        events.push(event(
            "content_block_start",
            &json!({"type": "content_block_start", "index": index, "content_block": start}),
        ));
        for delta in deltas {
            events.push(event(
                "content_block_delta",
                &json!({"type": "content_block_delta", "index": index, "delta": delta}),
            ));
        }
        events.push(event(
            "content_block_stop",
            &json!({"type": "content_block_stop", "index": index}),
        ));
    }
    events.push(event(
        "message_delta",
        &json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null}, "usage": {"output_tokens": 20}}),
    ));
    events.push(event("message_stop", &json!({"type": "message_stop"})));
    stream(events)
}

/// An OpenAI Responses stream: an optional reasoning item, then the call or the message.
pub fn responses_stream(turn: &Turn, input_tokens: u64) -> Reply {
    let mut items = Vec::new();
    let (response_id, message_id) = (response_id("resp"), response_id("msg"));
    match turn {
        Turn::Call(n) => {
            if thinks(*n) {
                let (text, encrypted) = thought(*n);
                items.push(json!({"type": "reasoning", "id": format!("rs_step_{n}"),
                    "summary": [{"type": "summary_text", "text": text}], "encrypted_content": encrypted}));
            }
            let arguments = json!({"cmd": command(*n)}).to_string();
            items.push(
                json!({"type": "function_call", "id": format!("fc_step_{n}"), "status": "completed",
                "call_id": format!("call_step_{n}"), "name": "exec_command", "arguments": arguments}),
            );
        }
        Turn::Text(text) => items.push(json!({"type": "message", "id": message_id, "role": "assistant",
            "status": "completed", "content": [{"type": "output_text", "text": text, "annotations": []}]})),
    }
    let response = |status: &str, output: &[Value], usage: Value| {
        json!({"id": response_id, "object": "response", "created_at": 1_700_000_000, "status": status,
            "model": "gpt-scripted", "output": output, "usage": usage})
    };
    let mut events = vec![event(
        "response.created",
        &json!({"type": "response.created", "sequence_number": 0, "response": response("in_progress", &[], Value::Null)}),
    )];
    for (index, item) in items.iter().enumerate() {
        events.push(event(
            "response.output_item.added",
            &json!({"type": "response.output_item.added", "output_index": index, "item": item}),
        ));
        if let Turn::Text(text) = turn {
            events.push(event(
                "response.output_text.delta",
                &json!({"type": "response.output_text.delta", "item_id": message_id, "output_index": index,
                    "content_index": 0, "delta": text}),
            ));
        }
        events.push(event(
            "response.output_item.done",
            &json!({"type": "response.output_item.done", "output_index": index, "item": item}),
        ));
    }
    let usage = json!({"input_tokens": input_tokens, "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 20, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": input_tokens + 20});
    events.push(event(
        "response.completed",
        &json!({"type": "response.completed", "response": response("completed", &items, usage)}),
    ));
    stream(events)
}

/// A 404 for any path the agent should not need.
pub fn not_found() -> Reply {
    Reply::json(
        404,
        &json!({"type": "error", "error": {"type": "not_found_error", "message": "not scripted"}}),
    )
}

/// The answer to `HEAD /` (Claude Code warms its connection with it).
pub fn empty() -> Reply {
    Reply {
        status: 200,
        headers: Vec::new(),
        chunks: Vec::new(),
        pause: Duration::ZERO,
    }
}
