//! Properties of `prepare` over random agent conversations (moved from the binary when the
//! engine was extracted): every request fits or says why, keeps tool calls paired and the
//! newest user message, and resending the whole history changes nothing.

use proptest::prelude::*;
use satchel_core::compact::is_user_turn;
use satchel_core::format::{self, MessageFormat, check_pairs};
use satchel_protocol::Action;
use serde_json::{Value, json};

use super::*;

/// Random agent conversations in the three formats: user turns, tool loops with parallel calls
/// and outputs from tiny to huge, unanswered calls, reasoning items (Responses), and very large
/// single user messages.
fn agent_conversation() -> impl Strategy<Value = (Vec<Value>, MessageFormat)> {
    let step = (0u8..5, 1usize..4, 0usize..40_000, any::<bool>());
    (prop::collection::vec(step, 1..25), 0u8..3).prop_map(|(steps, format)| {
        let format = [MessageFormat::Openai, MessageFormat::Anthropic, MessageFormat::OpenaiResponses][usize::from(format)];
        let mut m = vec![json!({"role": "user", "content": "fix the build in src/main.rs"})];
        let mut id = 0;
        for (kind, calls, size, answer) in steps {
            let last_is_user_text = m
                .last()
                .is_some_and(|l| l["role"] == "user" && !format::has_tool_result(l, format));
            if kind == 0 && !last_is_user_text {
                if m.last().is_some_and(|l| format::has_tool_result(l, format)) {
                    m.push(json!({"role": "assistant", "content": "done"}));
                }
                m.push(json!({"role": "user", "content": "x".repeat(size / 4 + 1)}));
                continue;
            }
            let ids: Vec<String> = (0..calls)
                .map(|_| {
                    id += 1;
                    format!("call_{id}")
                })
                .collect();
            let output = "line of output é\n".repeat(size / 17 + 1);
            match format {
                MessageFormat::Openai => {
                    let tc: Vec<Value> = ids
                        .iter()
                        .map(|i| json!({"id": i, "type": "function", "function": {"name": "bash", "arguments": "{\"command\":\"make\"}"}}))
                        .collect();
                    m.push(json!({"role": "assistant", "content": null, "tool_calls": tc}));
                    for i in ids.iter().filter(|_| answer) {
                        m.push(json!({"role": "tool", "tool_call_id": i, "content": output}));
                    }
                }
                MessageFormat::Anthropic => {
                    let tu: Vec<Value> = ids
                        .iter()
                        .map(|i| json!({"type": "tool_use", "id": i, "name": "bash", "input": {"command": "make"}}))
                        .collect();
                    m.push(json!({"role": "assistant", "content": tu}));
                    let results: Vec<Value> = ids
                        .iter()
                        .map(|i| json!({"type": "tool_result", "tool_use_id": i, "content": output}))
                        .collect();
                    m.push(json!({"role": "user", "content": if answer { json!(results) } else { json!("go on") }}));
                }
                MessageFormat::OpenaiResponses => {
                    m.push(json!({"type": "reasoning", "id": format!("rs_{id}"), "summary": [], "encrypted_content": "gAAA…é"}));
                    for i in &ids {
                        m.push(json!({"type": "function_call", "call_id": i, "name": "exec_command", "arguments": "{\"cmd\":\"make\"}"}));
                    }
                    for i in ids.iter().filter(|_| answer) {
                        m.push(json!({"type": "function_call_output", "call_id": i, "output": output}));
                    }
                }
            }
        }
        (m, format)
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn prepare_fits_or_says_why_keeps_pairs_and_is_idempotent((messages, format) in agent_conversation()) {
        let harness = Harness::new(small_window());
        let mut last = None;
        for (i, message) in messages.iter().enumerate() {
            let one = std::slice::from_ref(message);
            let result = if i == 0 { harness.prepare(one) } else { harness.append(one) };
            let sent = returned(&result);
            prop_assert!(
                result.tokens.total <= result.tokens.limit || result.over_limit.is_some(),
                "over the limit without saying why: {:?}", result.tokens
            );
            prop_assert_eq!(check_pairs(&sent, format), Ok(()));
            let newest_user = messages[..=i].iter().rev().find(|m| is_user_turn(m, format));
            if let Some(user) = newest_user {
                let text = user["content"].as_str().unwrap_or_default();
                let opening = &serde_json::to_string(text).unwrap()[1..text.len().min(60) + 1];
                prop_assert!(sent.iter().any(|m| m.to_string().contains(opening)), "newest user message kept");
            }
            last = Some(result);
        }
        // Sending the same full history again changes nothing.
        let again = harness.prepare(&messages);
        let last = last.unwrap();
        prop_assert_eq!(again.reconciliation.appended, 0);
        let texts = |r: &Prepared| r.messages.iter().map(|m| m.get().to_owned()).collect::<Vec<_>>();
        prop_assert_eq!(texts(&again), texts(&last));
        prop_assert!(!again.actions.iter().any(|a| matches!(a, Action::Compacted(_))));
    }
}
