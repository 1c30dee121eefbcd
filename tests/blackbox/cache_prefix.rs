//! Cache-stable requests (issue 18), through the real binary: an agent loop appended one
//! message per call, with tool definitions on every call. `cache_stable_prefix_tokens` is 0 on
//! the first call; while the previous request is a prefix of the new one it is that request's
//! whole size (it grows by the appended messages' tokens); right after a compaction only the
//! tools and the system message before the new summary are left of it. With the default
//! `pruning_phase_batch` the request breaks that way far less often than with the recent window
//! moving on every message (`pruning_phase_batch` 1).

use serde_json::{Value, json};

use crate::support::builders::{call_message, result_message, system, tool_output, user};
use crate::support::trajectories::Format;
use crate::support::{Daemon, actions};

/// The estimate tokenizer and a window small enough to compact a few times in the loop.
const ENV: [(&str, &str); 2] = [("SATCHEL_TOKENIZER", "estimate"), ("SATCHEL_MAX_INPUT_LENGTH", "8192")];

/// A system message, a request, then tool turns whose outputs (4 000 bytes) are over the
/// old-phase limit, so each one changes where it leaves the recent window.
fn agent_loop() -> Vec<Value> {
    let mut messages = vec![
        system("You are a coding agent. Use the bash tool."),
        user("Fix the failing parser tests."),
    ];
    for step in 0..24 {
        let id = format!("call_{step}");
        let args = json!({"command": format!("cargo test -p parser module_{step}")});
        messages.push(call_message(Format::Openai, &id, "bash", &args, "Running the tests."));
        messages.push(result_message(
            Format::Openai,
            &id,
            &tool_output(step, 4_000, "crates/parser/src/lib.rs"),
        ));
    }
    messages
}

fn tools() -> Value {
    json!([{"type": "function", "function": {"name": "bash", "description": "Runs a shell command.",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}}])
}

/// Replays the loop one message per call with `config`, checks the prefix of every call, and
/// returns the number of calls whose request did not extend the previous one whole, and of
/// compactions.
fn replay(config: Value) -> (usize, usize) {
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = Daemon::start(dir.path(), &ENV);
    let messages = agent_loop();
    let mut previous: Option<(Vec<Value>, u64)> = None;
    let (mut breaks, mut compactions) = (0, 0);
    for i in 0..messages.len() {
        let mut params = json!({"session_id": "s", "tools": tools(), "config": config});
        if i == 0 {
            params["messages"] = json!(&messages[..1]);
        } else {
            params["append"] = json!(&messages[i..=i]);
        }
        let result = daemon.call("context.prepare", params);
        let prefix = result["cache_stable_prefix_tokens"].as_u64().expect("a prefix");
        let total = result["tokens"]["total"].as_u64().unwrap();
        let returned = result["messages"].as_array().unwrap().clone();
        let compacted = !actions(&result, "compacted").is_empty();
        match &previous {
            None => assert_eq!(prefix, 0, "the first call has nothing to reuse"),
            Some((before, before_total)) => {
                let extends = returned.len() >= before.len() && returned[..before.len()] == before[..];
                if extends {
                    assert_eq!(prefix, *before_total, "call {i}: the whole previous request is reused");
                } else {
                    breaks += 1;
                    assert!(prefix < *before_total, "call {i}");
                }
                if compacted {
                    compactions += 1;
                    // The tools and the system message; the summary is new.
                    let small = result["tokens"]["tools"].as_u64().unwrap() + 20;
                    assert!(prefix <= small, "call {i}: {prefix} after a compaction");
                }
            }
        }
        assert!(prefix <= total);
        previous = Some((returned, total));
    }
    daemon.shutdown();
    (breaks, compactions)
}

#[test]
fn the_stable_prefix_grows_by_the_appended_messages_and_batching_keeps_it() {
    let (batched, compactions) = replay(json!({}));
    assert!(compactions >= 1, "the loop must compact");
    let (every_message, _) = replay(json!({"pruning_phase_batch": 1}));
    assert!(
        batched * 2 < every_message,
        "breaks: {batched} batched, {every_message} moving with every message"
    );
}
