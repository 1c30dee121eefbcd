//! Ingest: new messages are offloaded and logged. `check_ingest` sends a history in calls
//! (the first a full list, then appends), snapshots what each call reports, and checks that
//! every offloaded text is in its file and out of the log.

use satchel_protocol::{Action, Config};
use serde_json::{Value, json};

use super::*;

/// Sends `calls` (the first as `messages`, the others as `append`), snapshots their actions
/// as `name`, and checks each `offloaded` action against the workspace and the log.
fn check_ingest(config: Config, calls: &[Vec<Value>], name: &str) -> Harness {
    let harness = Harness::new(config);
    let mut sent: Vec<Value> = Vec::new();
    let mut reported: Vec<Vec<Action>> = Vec::new();
    for (i, call) in calls.iter().enumerate() {
        let result = if i == 0 {
            harness.prepare(call)
        } else {
            harness.append(call)
        };
        sent.extend(call.iter().cloned());
        assert_eq!(result.reconciliation.session_messages, sent.len());
        reported.push(result.actions);
    }
    insta::assert_snapshot!(name, serde_json::to_string_pretty(&reported).unwrap());
    let records = harness.records();
    let messages: Vec<&Value> = records.iter().filter(|r| r["record"] == "message").collect();
    assert_eq!(messages.len(), sent.len(), "one record per message");
    for action in reported.iter().flatten() {
        let Action::Offloaded {
            index,
            pointer,
            file,
            total_bytes,
            ..
        } = action
        else {
            continue;
        };
        let full = sent[*index].pointer(pointer).and_then(Value::as_str).expect("a text");
        assert_eq!(full.len(), *total_bytes);
        let in_file = std::fs::read_to_string(harness.path(file)).expect("the offload file exists");
        assert_eq!(in_file, full, "the file holds the text byte for byte");
        let logged = &messages[*index];
        assert_eq!(
            logged["message"].pointer(pointer),
            Some(&json!("")),
            "the log keeps no copy"
        );
        assert!(
            logged["offloads"]
                .as_array()
                .is_some_and(|o| o.iter().any(|o| o["pointer"] == *pointer && o["file"] == *file)),
            "the log names the file: {logged}"
        );
    }
    harness
}

/// The recent window moving with every message (`pruning_phase_batch` 1), so that one new
/// message moves a result to the old phase.
fn every_message() -> Config {
    let mut config = Config::default();
    config.recent.pruning_phase_batch = 1;
    config
}

#[test]
fn a_big_tool_result_is_offloaded_then_cut_once_it_is_old() {
    let calls = [
        vec![
            user("Run the tests."),
            run("c1", "cargo test"),
            output("c1", &big_output(1, 10_000)),
        ],
        // Two more messages: the output leaves the recent window and is cut to the old limit.
        vec![say("Two tests fail."), user("Fix them.")],
    ];
    let harness = check_ingest(every_message(), &calls, "offload_openai");
    let inspected = harness.inspect();
    assert_eq!(inspected.offloaded.len(), 1);
    assert_eq!(inspected.offloaded[0].index, 2);
}

#[test]
fn anthropic_result_blocks_are_offloaded_one_by_one() {
    let calls = [vec![
        json!({"role": "user", "content": "Run the tests."}),
        json!({"role": "assistant", "content": [
            {"type": "tool_use", "id": "t1", "name": "bash", "input": {"command": "cargo test"}},
            {"type": "tool_use", "id": "t2", "name": "read_file", "input": {"path": "src/lib.rs"}}]}),
        json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": [
                {"type": "text", "text": "short"},
                {"type": "text", "text": big_output(2, 8_000)}]},
            {"type": "tool_result", "tool_use_id": "t2", "content": big_output(3, 4_000)}]}),
    ]];
    check_ingest(Config::default(), &calls, "offload_anthropic");
}

#[test]
fn the_same_text_twice_is_one_file() {
    let text = big_output(4, 6_000);
    let calls = [
        vec![user("Run the tests."), run("c1", "cargo test"), output("c1", &text)],
        vec![run("c2", "cargo test"), output("c2", &text)],
    ];
    check_ingest(every_message(), &calls, "offload_twice");
}

#[test]
fn nothing_is_offloaded_when_pruning_is_off() {
    let mut off = Config::default();
    off.render.pruning_enabled = false;
    let calls = [vec![
        user("Run the tests."),
        run("c1", "cargo test"),
        output("c1", &big_output(5, 60_000)),
    ]];
    let harness = check_ingest(off, &calls, "offload_off");
    assert!(harness.inspect().offloaded.is_empty());
}
