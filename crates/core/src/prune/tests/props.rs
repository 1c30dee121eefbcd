//! Invariants for any conversation, any format, any target and plan: see [`invariants`],
//! plus that only tool-result texts with a file and reasoning change, that the protected part
//! holds the newest turns, and that every string survives a JSON round trip.

use proptest::prelude::*;
use serde_json::json;

use super::*;

/// One assistant step: reasoning (0 none, 1 beside the text, 2 a reply of only reasoning),
/// its text, and the outputs of its calls (each with or without an offload file).
#[derive(Debug, Clone)]
struct Step {
    reasoning: u8,
    text: String,
    outputs: Vec<(String, bool)>,
}

/// A user turn: its words, whether they join the results message before them (Anthropic),
/// and the agent's steps.
#[derive(Debug, Clone)]
struct Turn {
    words: String,
    merged: bool,
    steps: Vec<Step>,
}

fn output() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z ]{0,30}",
        "\\PC{40,400}",
        "(日本語|x|é|\n){20,200}",
        "([a-z]{1,8} ){10,80}",
    ]
}

fn turns() -> impl Strategy<Value = Vec<Turn>> {
    let step = (
        0..3u8,
        "[a-zA-Z ]{0,20}",
        prop::collection::vec((output(), any::<bool>()), 0..3),
    )
        .prop_map(|(reasoning, text, outputs)| Step {
            reasoning,
            text,
            outputs,
        });
    let turn = ("[a-zA-Z ]{1,20}", any::<bool>(), prop::collection::vec(step, 0..4))
        .prop_map(|(words, merged, steps)| Turn { words, merged, steps });
    prop::collection::vec(turn, 0..7)
}

/// The conversation of `turns` and the ids of the results with an offload file.
fn build(turns: &[Turn], format: MessageFormat) -> (Vec<Value>, Vec<String>) {
    let anthropic = format == MessageFormat::Anthropic;
    let mut messages: Vec<Value> = vec![json!({"role": "system", "content": "sys"})];
    let mut offloaded = Vec::new();
    let mut n = 0;
    for turn in turns {
        let last_has_results = messages.last().is_some_and(|m| has_tool_result(m, format));
        match messages.last_mut().and_then(|m| m["content"].as_array_mut()) {
            Some(blocks) if anthropic && turn.merged && last_has_results => {
                blocks.push(json!({"type": "text", "text": turn.words}));
            }
            _ => messages.push(json!({"role": "user", "content": turn.words})),
        }
        for step in &turn.steps {
            let ids: Vec<String> = step
                .outputs
                .iter()
                .map(|_| {
                    n += 1;
                    format!("c{n}")
                })
                .collect();
            let outputs = ids.iter().zip(&step.outputs);
            if format == MessageFormat::OpenaiResponses {
                // Signed reasoning is an item of its own, which pruning never touches.
                if step.reasoning > 0 {
                    messages.push(json!({"type": "reasoning", "summary": [], "encrypted_content": "opaque"}));
                }
                if !step.text.is_empty() {
                    messages.push(json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": step.text}]}));
                }
                messages.extend(ids.iter().map(
                    |id| json!({"type": "function_call", "call_id": id, "name": "exec_command", "arguments": "{}"}),
                ));
                messages.extend(
                    outputs.map(|(id, (out, _))| json!({"type": "function_call_output", "call_id": id, "output": out})),
                );
            } else {
                messages.push(assistant(step, &ids, anthropic));
                if anthropic && !ids.is_empty() {
                    let blocks: Vec<Value> = outputs
                        .map(|(id, (out, _))| json!({"type": "tool_result", "tool_use_id": id, "content": out}))
                        .collect();
                    messages.push(json!({"role": "user", "content": blocks}));
                } else if !anthropic {
                    messages.extend(outputs.map(|(id, (out, _))| tool(id, out)));
                }
            }
            offloaded.extend(
                ids.iter()
                    .zip(&step.outputs)
                    .filter(|(_, (_, file))| *file)
                    .map(|(id, _)| id.clone()),
            );
        }
    }
    (messages, offloaded)
}

fn assistant(step: &Step, ids: &[String], anthropic: bool) -> Value {
    let only_reasoning = step.reasoning == 2 && ids.is_empty();
    let text = if only_reasoning { "" } else { step.text.as_str() };
    let thought = "thinking it over";
    if anthropic {
        let mut blocks = Vec::new();
        if step.reasoning > 0 {
            blocks.push(json!({"type": "thinking", "thinking": thought, "signature": "s"}));
            blocks.push(json!({"type": "redacted_thinking", "data": "opaque"}));
        }
        if !text.is_empty() {
            blocks.push(json!({"type": "text", "text": text}));
        }
        blocks.extend(
            ids.iter()
                .map(|id| json!({"type": "tool_use", "id": id, "name": "bash", "input": {"command": "make"}})),
        );
        json!({"role": "assistant", "content": blocks})
    } else {
        let mut message =
            json!({"role": "assistant", "content": if text.is_empty() { Value::Null } else { json!(text) }});
        if step.reasoning > 0 {
            message["reasoning_content"] = json!(thought);
            message["reasoning_details"] = json!([{"type": "reasoning.text", "text": thought}]);
        }
        if !ids.is_empty() {
            let calls: Vec<Value> = ids
                .iter()
                .map(|id| json!({"id": id, "type": "function", "function": {"name": "bash", "arguments": "{}"}}))
                .collect();
            message["tool_calls"] = json!(calls);
        }
        message
    }
}

/// Only tool-result texts with a file (each becoming a stub naming it) and reasoning changed.
fn only_prunable_changes(case: &Case, pruned: &Pruned) {
    for r in &pruned.replacements {
        let old = &case.messages[r.position];
        let mut expected = old.clone();
        for text in result_texts(old, case.format) {
            let (before, after) = (old.pointer(&text.pointer), r.message.pointer(&text.pointer));
            if before == after {
                continue;
            }
            let (_, _, file) = case
                .offloaded
                .iter()
                .find(|(p, pointer, _)| *p == r.position && *pointer == text.pointer)
                .expect("only a text with a file is stubbed");
            let (before, after) = (before.unwrap().as_str().unwrap(), after.unwrap().as_str().unwrap());
            assert!(after.starts_with(&format!("{}\n", cut_chars(before, case.stub_chars).0)));
            assert!(after.contains(file.as_str()) && after.len() < before.len());
            *expected.pointer_mut(&text.pointer).unwrap() = json!(after);
        }
        if is_assistant(old) && has_reasoning(old) {
            remove_reasoning(&mut expected);
        }
        assert_eq!(
            r.message, expected,
            "message {} changed beyond its prunable parts",
            r.position
        );
        let text = serde_json::to_string(&r.message).unwrap();
        assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), r.message);
    }
}

/// The protected part starts at a message that answers no call and holds the newest turns.
fn protects_the_newest_turns(case: &Case) {
    let boundary = protected_start(&case.messages, case.format, case.protected_turns);
    let turns = case.messages.iter().filter(|m| is_turn(m)).count();
    let protected = case.messages[boundary..].iter().filter(|m| is_turn(m)).count();
    assert!(protected >= case.protected_turns.min(turns));
    if boundary > 0 {
        assert!(!has_tool_result(&case.messages[boundary], case.format));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn pruning_keeps_every_invariant(
        turns in turns(),
        format in 0..3usize,
        protected_turns in 1..4usize,
        stub_chars in 5..60usize,
        target_share in 0.0..1.2f64,
    ) {
        let format = [MessageFormat::Openai, MessageFormat::Anthropic, MessageFormat::OpenaiResponses][format];
        let (messages, offloaded) = build(&turns, format);
        prop_assert!(check_pairs(&messages, format).is_ok());
        let ids: Vec<&str> = offloaded.iter().map(String::as_str).collect();
        let mut case = Case::new(format, messages).offload(&ids).protect(protected_turns);
        case.stub_chars = stub_chars;
        let target = (case.total() as f64 * target_share) as u64;
        let case = case.target(target);
        let pruned = case.prune();
        invariants(&case, &pruned);
        only_prunable_changes(&case, &pruned);
        protects_the_newest_turns(&case);
    }
}
