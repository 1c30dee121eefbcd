//! Invariants for any span: the summary fits its budget, is deterministic, and every user
//! message is still there (as a request, by its index, or as constraints), after one
//! compaction and after a second one merged into it.

use proptest::prelude::*;
use serde_json::json;

use satchel_protocol::IdentifierList;

use super::*;
use crate::summary::extract::prose::{is_constraint, sentences};

fn fragment() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z]{1,8}/[a-z_]{1,12}\\.(rs|py|java)(:[0-9]{1,3})?",
        "cargo test -p [a-z]{1,6}( -- --nocapture)?",
        "sed -i 's/a/b/' [a-z]{1,6}\\.rs",
        "(error|Exception|FAILED)[:a-z ]{0,40}",
        "(Let's|I'll|Because|You must|Never|Please|Next I will) [a-z ]{0,40}[.!?]",
        "Here is a demonstration [a-z ]{0,20}",
        "\\PC{0,60}",
        "[a-z]{1,5}\n[a-z `]{0,20}\n```\ncode\n```",
    ]
}

/// A conversation of user turns and assistant calls with results, in both formats.
fn conversation(anthropic: bool) -> impl Strategy<Value = Vec<Value>> {
    prop::collection::vec(
        (
            any::<bool>(),
            prop::collection::vec(fragment(), 1..4),
            fragment(),
            fragment(),
            any::<bool>(),
        ),
        0..40,
    )
    .prop_map(move |turns| {
        let mut out = Vec::new();
        for (i, (is_user, words, command, output, is_error)) in turns.into_iter().enumerate() {
            let text = words.join(" ");
            let id = format!("c{i}");
            if is_user {
                out.push(json!({"role": "user", "content": text}));
            } else if anthropic {
                out.push(json!({"role": "assistant", "content": [{"type": "text", "text": text},
                    {"type": "tool_use", "id": id, "name": "bash", "input": {"command": command}}]}));
                out.push(json!({"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": id, "is_error": is_error, "content": output}]}));
            } else {
                out.push(json!({"role": "assistant", "content": text, "tool_calls": [{"id": id, "type": "function",
                    "function": {"name": "edit_file", "arguments": json!({"path": command, "new": output}).to_string()}}]}));
                out.push(json!({"role": "tool", "tool_call_id": id, "content": output}));
            }
        }
        out
    })
}

/// Every user text message of `messages` (indices from `first`) is in `summary`: listed as a
/// request whose index the rendering names, or (when every sentence of it is a constraint)
/// through its constraints. A message repeated word for word later in the span may be listed
/// at its later place only. Short replies ("ok") are exempt.
fn assert_users_kept(summary: &CompactSummary, messages: &[Value], first: usize) -> Result<(), TestCaseError> {
    let text = render_summary(summary);
    let named = |index: usize| {
        let referenced = text
            .lines()
            .filter_map(|l| l.trim().strip_prefix("- (messages "))
            .any(|l| {
                l.split(':')
                    .next()
                    .unwrap_or("")
                    .split(',')
                    .any(|n| n.trim().parse() == Ok(index))
            });
        summary.requests.iter().any(|r| r.index == index)
            && (text.contains(&format!("(message {index},"))
                || text.contains(&format!("(message {index})"))
                || referenced)
    };
    let collapsed = |m: &Value| m["content"].as_str().map(crate::summary::extract::text::normalized);
    for (position, message) in messages.iter().enumerate() {
        let Some(words) = message["content"].as_str() else {
            continue;
        };
        if message["role"] != "user" || words.split_whitespace().count() < 3 {
            continue;
        }
        let same = collapsed(message);
        let repeats = messages[position..]
            .iter()
            .enumerate()
            .filter(|(_, m)| m["role"] == "user" && collapsed(m) == same)
            .map(|(k, _)| first + position + k);
        let mut candidates = repeats;
        let index = first + position;
        let (listed, by_index) = if candidates.any(named) {
            (true, true)
        } else {
            (false, false)
        };
        let prose = sentences(words);
        let as_constraints = !prose.is_empty()
            && prose.iter().all(|s| is_constraint(s))
            && (prose.iter().all(|s| {
                let opening: String = s.chars().take(20).collect();
                summary.constraints.iter().any(|c| c.starts_with(&opening))
            }) || summary
                .critical_context
                .omitted
                .iter()
                .any(|o| o.list == IdentifierList::Constraints));
        prop_assert!(
            (listed && by_index) || as_constraints,
            "user message {index} {words:?} missing from\n{text}"
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn summaries_fit_keep_every_user_message_and_are_deterministic(
        anthropic in any::<bool>(),
        (first, second) in any::<bool>().prop_flat_map(|a| (conversation(a), conversation(a))),
        max_tokens in 600u64..3000,
    ) {
        let format = if anthropic { MessageFormat::Anthropic } else { MessageFormat::Openai };
        let case = |messages: &[Value]| Case { format, max_tokens, ..Case::new(messages.to_vec()) };
        // `summarize` asserts the budget.
        let summary = case(&first).summarize();
        prop_assert_eq!(&summary, &case(&first).summarize());
        assert_users_kept(&summary, &first, 0)?;
        let merged = case(&second).after(&summary).summarize();
        prop_assert_eq!(&merged, &case(&second).after(&summary).summarize());
        assert_users_kept(&merged, &[first.clone(), second.clone()].concat(), 0)?;
    }
}
