//! A Codex-shaped OpenAI Responses conversation through `prepare`: its big outputs are
//! offloaded, it compacts, and every item is either archived as sent or still sent, with its
//! pairs and reasoning items intact.

use satchel_core::format::{MessageFormat, check_pairs};
use satchel_protocol::{Action, CompactionReport};

use super::*;

fn developer(text: &str) -> Value {
    json!({"type": "message", "id": "msg_dev", "role": "developer", "content": [{"type": "input_text", "text": text}]})
}

fn request(text: &str) -> Value {
    json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]})
}

/// One step of the loop: a signed reasoning item, an `exec_command` call and its output of
/// about `bytes` bytes (multi-byte text, an error at its end).
fn step(turn: usize, bytes: usize) -> [Value; 3] {
    let id = format!("call_{turn}");
    let line = format!("test módulo_{turn}::case … ok\n");
    let output = format!(
        "Process exited with code 101\nOutput:\n{}error[E0599]: no method named `frob` found in module_{turn}\n",
        line.repeat(bytes / line.len())
    );
    [
        json!({"type": "reasoning", "id": format!("rs_{turn}"), "summary": [{"type": "summary_text", "text": "run the tests"}],
               "encrypted_content": format!("gAAAAB{turn}-opaque")}),
        json!({"type": "function_call", "status": "completed", "id": format!("fc_{turn}"), "name": "exec_command",
               "arguments": json!({"cmd": format!("cargo test -p parser module_{turn}")}).to_string(), "call_id": id}),
        json!({"type": "function_call_output", "id": format!("fco_{turn}"), "call_id": id, "output": output}),
    ]
}

fn codex_loop(turns: usize, bytes: usize) -> Vec<Value> {
    let mut items = vec![
        developer("You are a coding agent running in the Codex CLI."),
        request("Fix the failing tests in crates/parser. Do not change the public API."),
    ];
    for turn in 0..turns {
        items.extend(step(turn, bytes));
    }
    items
}

#[test]
fn a_responses_conversation_is_offloaded_compacted_and_archived_with_nothing_lost() {
    let mut harness = Harness::new(small_window());
    let items = codex_loop(8, 6_000);
    let result = harness.prepare(&items);
    assert_eq!(result.format, MessageFormat::OpenaiResponses, "detected from the items");

    let offloaded: Vec<(usize, &str)> = result
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::Offloaded { index, pointer, .. } => Some((*index, pointer.as_str())),
            _ => None,
        })
        .collect();
    assert_eq!(offloaded, (0..8).map(|t| (4 + 3 * t, "/output")).collect::<Vec<_>>());
    let reports: Vec<&CompactionReport> = result
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::Compacted(report) => Some(report),
            _ => None,
        })
        .collect();
    let [report] = reports[..] else {
        panic!("one compaction, got {:?}", result.actions);
    };
    assert!(result.over_limit.is_none(), "{:?}", result.over_limit);
    assert!(result.tokens.total < report.tokens_before);

    // The request: the developer message first, the summary as a user message item after it,
    // the pairs valid and each reasoning item byte-for-byte before its call.
    let sent = returned(&result);
    assert_eq!(sent[0], items[0]);
    assert_eq!(sent[1]["type"], "message");
    assert_eq!(sent[1]["role"], "user");
    let summary = sent[1]["content"][0]["text"].as_str().expect("a summary text");
    assert!(summary.contains("cargo test -p parser module_0"), "{summary}");
    assert!(
        summary.contains("no method named `frob` found in module_0"),
        "{summary}"
    );
    assert_eq!(sent[2], items[1], "the request is pinned after the summary");
    assert_eq!(check_pairs(&sent, MessageFormat::OpenaiResponses), Ok(()));
    for (i, item) in sent.iter().enumerate().filter(|(_, m)| m["type"] == "reasoning") {
        assert!(items.contains(item), "reasoning kept as sent");
        assert_eq!(sent[i + 1]["type"], "function_call", "reasoning stays before its call");
    }

    // Every item is archived as sent, or still sent (an output may be cut, never lost).
    let archive = harness.archive();
    let archived: Vec<usize> = archive.iter().map(|l| l["index"].as_u64().unwrap() as usize).collect();
    for line in &archive {
        assert_eq!(
            line["message"],
            items[line["index"].as_u64().unwrap() as usize],
            "archived as sent"
        );
    }
    for (index, item) in items.iter().enumerate().filter(|(i, _)| !archived.contains(i)) {
        let live = if item["type"] == "function_call_output" {
            sent.iter()
                .any(|m| m["call_id"] == item["call_id"] && m["type"] == item["type"])
        } else {
            sent.contains(item)
        };
        assert!(live, "item {index} is neither archived nor sent");
    }
    assert!(archived.contains(&2), "the oldest step was compacted");
    // The full texts of the live offloaded outputs are in their files.
    let inspected = harness.inspect();
    assert!(!inspected.offloaded.is_empty());
    for result in &inspected.offloaded {
        let full = std::fs::read_to_string(harness.path(&result.file)).expect("the offloaded file");
        assert_eq!(
            items[result.index].pointer(&result.pointer).and_then(Value::as_str),
            Some(full.as_str())
        );
    }
    assert_eq!(inspected.archived_messages, report.messages);

    // Resending the same items changes nothing, also on a new engine.
    let again = harness.prepare(&items);
    assert_eq!(returned(&again), sent);
    harness.restart();
    let reloaded = harness.prepare(&items);
    assert_eq!(returned(&reloaded), sent);
    assert!(reloaded.actions.is_empty(), "{:?}", reloaded.actions);
}

#[test]
fn a_pending_call_at_the_end_waits_and_an_abandoned_one_is_answered() {
    let harness = Harness::new(small_window());
    let mut items = codex_loop(1, 100);
    items.extend(step(1, 100).into_iter().take(2));
    let sent = returned(&harness.prepare(&items));
    assert_eq!(sent, items, "a call at the very end is the client's to run");
    items.push(request("stop, do something else"));
    let result = harness.prepare(&items);
    let sent = returned(&result);
    assert_eq!(
        sent[7],
        json!({"type": "function_call_output", "call_id": "call_1", "output": "[satchel: no result was recorded for this tool call]"})
    );
    assert_eq!(sent[8], items[7]);
}
