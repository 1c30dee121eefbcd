//! The context check and the compaction split (F7): which messages leave the session.
//!
//! The split keeps a tail of about `reserve` tokens, and at least
//! `compact_keep_recent_messages` messages (CoPaw's `COPAW_MEMORY_COMPACT_KEEP_RECENT`), and
//! compacts what is before it, but only at a point where nothing is cut in half: never between a tool call and its results, never
//! between a user message and the assistant reply to it. The newest user message is never
//! compacted, even when it lies before the split (it is kept, pinned); so are system messages
//! (and, in the Responses format, `developer` ones), wherever they are (a repeated one once), and a provider-native compaction with everything
//! before it and the rest of its step ([`fixed_prefix`]). One backward pass over precomputed token counts: linear in the messages
//! (the peer's suffix search is quadratic).

use std::borrow::Borrow;

use satchel_protocol::Config;
use serde_json::Value;

use crate::format::{MessageFormat, has_tool_result, is_instructions, last_native_compaction, role_of, tool_calls};

/// Most system messages a compaction keeps from the middle of a conversation (the newest).
pub const MAX_PINNED_INSTRUCTIONS: usize = 16;

/// What the kept tail of a compaction must hold.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TailBudget {
    /// Tokens of recent messages to keep: the tail is the longest that fits them.
    pub tokens: u64,
    /// Newest messages kept whatever their tokens: a tail shorter than this is never chosen,
    /// even when it is all that fits `tokens`. 0: no minimum.
    pub min_messages: usize,
}

impl TailBudget {
    /// A configuration's tail: `reserve_tokens()` and `compact_keep_recent_messages`.
    pub fn of(config: &Config) -> Self {
        TailBudget {
            tokens: config.reserve_tokens(),
            min_messages: config.compaction.compact_keep_recent_messages,
        }
    }
}

/// A reserve in tokens alone, with no minimum of messages.
impl From<u64> for TailBudget {
    fn from(tokens: u64) -> Self {
        TailBudget {
            tokens,
            min_messages: 0,
        }
    }
}

impl From<&Config> for TailBudget {
    fn from(config: &Config) -> Self {
        TailBudget::of(config)
    }
}

/// What a compaction does to a list of messages (indices into that list).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SplitPlan {
    /// Messages to compact (archive and summarise), in order.
    pub compact: Vec<usize>,
    /// Messages kept, in order: pinned ones, then the tail.
    pub keep: Vec<usize>,
    /// First index of the kept tail.
    pub tail_start: usize,
    /// Tokens of the kept tail.
    pub tail_tokens: u64,
}

fn role(message: &Value) -> Option<&str> {
    role_of(message)
}

/// A message that starts a user turn: a user message that is not (only) tool results.
pub fn is_user_turn(message: &Value, format: MessageFormat) -> bool {
    role(message) == Some("user") && !has_tool_result(message, format)
}

/// Whether the list may be cut just before `k` (1 ≤ k < len).
fn is_split_point(messages: &[impl Borrow<Value>], k: usize, format: MessageFormat) -> bool {
    let here = messages[k].borrow();
    let before = messages[k - 1].borrow();
    if is_user_turn(here, format) {
        return true;
    }
    // An assistant message that follows tool results and calls tools again continues the agent
    // loop: cutting here separates nothing, provided the results before it are complete, which
    // holds because results directly precede it. One that calls no tool is the final answer
    // to the request, and is never kept without the request and the calls that led to it.
    if role(here) != Some("assistant") || !has_tool_result(before, format) {
        return false;
    }
    if format != MessageFormat::OpenaiResponses {
        return !tool_calls(here, format).is_empty();
    }
    // A Responses step is a run of items (reasoning, text, calls); the cut goes before the
    // run, so a reasoning item stays with what follows it. Only the first item of a run is
    // after a result, so each run is scanned once and the pass stays linear.
    messages[k..]
        .iter()
        .map(Borrow::borrow)
        .take_while(|m| role(m) == Some("assistant"))
        .any(|m| !tool_calls(m, format).is_empty())
}

/// How many leading messages no compaction takes: the leading instructions (system
/// messages, and `developer` ones in the Responses format) and, when the history holds a
/// provider-native compaction, everything up to the first point after it where the list may
/// be cut. The provider drops what comes before its own compaction, so summarising that would
/// be wasted, and the native item is signed: it stays as sent, with the calls and results of
/// its step. `messages.len()` when no such point follows the native compaction.
pub fn fixed_prefix(messages: &[impl Borrow<Value>], format: MessageFormat) -> usize {
    let instructions = messages
        .iter()
        .take_while(|m| is_instructions((*m).borrow(), format))
        .count();
    match last_native_compaction(messages, format) {
        None => instructions,
        Some(native) => (native + 1..messages.len())
            .find(|&k| is_split_point(messages, k, format))
            .unwrap_or(messages.len())
            .max(instructions),
    }
}

/// System (and Responses `developer`) messages in `range`: the zones count them as the
/// system prompt, which is never compacted, and agents put their environment there in the
/// middle of a conversation (Claude Code's `role: "system"` messages). A message whose content
/// a later one repeats (a reminder sent again) is not pinned: the later one stands for it;
/// nor is one past the newest [`MAX_PINNED_INSTRUCTIONS`], so an agent that sends a new one
/// every turn cannot fill the window with them.
fn pinned_instructions(
    messages: &[impl Borrow<Value>],
    range: std::ops::Range<usize>,
    format: MessageFormat,
) -> Vec<usize> {
    let mut seen = std::collections::HashSet::new();
    let mut pinned: Vec<usize> = (range.start..messages.len())
        .rev()
        .filter(|&i| {
            let message = messages[i].borrow();
            is_instructions(message, format)
                && seen.insert(message.get("content").map(Value::to_string))
                && i < range.end
        })
        .take(MAX_PINNED_INSTRUCTIONS)
        .collect();
    pinned.reverse();
    pinned
}

/// Plans a compaction that keeps about `tail.tokens` tokens of tail, and at least
/// `tail.min_messages` messages (pass a [`Config`] for both, or a `u64` for the tokens alone).
///
/// `tokens[i]` is the count of `messages[i]` as it will be sent. Returns `None` when nothing
/// can be compacted without breaking a rule (for example a conversation that is one long
/// tool loop after its only split point, or one whose only split points keep fewer than
/// `min_messages`). When even the smallest valid tail exceeds the reserve, the smallest valid
/// tail is kept — the caller reports that the request may still not fit and why. The minimum
/// widens the tail to the next split point at or before it, so a tool call still stays with its
/// results and an answer with its request.
pub fn plan_split(
    messages: &[impl Borrow<Value>],
    tokens: &[u64],
    format: MessageFormat,
    tail: impl Into<TailBudget>,
) -> Option<SplitPlan> {
    let TailBudget {
        tokens: reserve,
        min_messages,
    } = tail.into();
    let n = messages.len();
    debug_assert_eq!(n, tokens.len());
    let pinned_prefix = fixed_prefix(messages, format);
    let newest_user = messages.iter().rposition(|m| is_user_turn(m.borrow(), format));

    // Backward pass: the smallest valid split point whose tail fits, else the largest valid one;
    // split points whose tail is shorter than the minimum are passed over.
    let mut tail = 0u64;
    let mut best: Option<(usize, u64)> = None;
    for k in (pinned_prefix + 1..n).rev() {
        tail += tokens[k];
        if !is_split_point(messages, k, format) || n - k < min_messages {
            continue;
        }
        if tail <= reserve || best.is_none() {
            best = Some((k, tail));
        } else {
            break;
        }
    }
    let (tail_start, tail_tokens) = best?;
    let pinned_user = newest_user.filter(|&u| u >= pinned_prefix && u < tail_start);
    let instructions = pinned_instructions(messages, pinned_prefix..tail_start, format);
    let pinned = |i: usize| Some(i) == pinned_user || instructions.contains(&i);
    let compact: Vec<usize> = (pinned_prefix..tail_start).filter(|&i| !pinned(i)).collect();
    if compact.is_empty() {
        return None;
    }
    let keep = (0..pinned_prefix)
        .chain((pinned_prefix..tail_start).filter(|&i| pinned(i)))
        .chain(tail_start..n)
        .collect();
    Some(SplitPlan {
        compact,
        keep,
        tail_start,
        tail_tokens,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::check_pairs;
    use proptest::prelude::*;
    use serde_json::json;

    fn user(t: &str) -> Value {
        json!({"role": "user", "content": t})
    }
    fn call(id: &str) -> Value {
        json!({"role": "assistant", "content": null, "tool_calls": [{"id": id, "type": "function", "function": {"name": "bash", "arguments": "{}"}}]})
    }
    fn result(id: &str) -> Value {
        json!({"role": "tool", "tool_call_id": id, "content": "out"})
    }
    fn reply(t: &str) -> Value {
        json!({"role": "assistant", "content": t})
    }

    #[test]
    fn keeps_the_reserve_at_a_clean_boundary_and_pins_the_newest_user_message() {
        let f = MessageFormat::Openai;
        let m = vec![
            json!({"role": "system", "content": "sys"}),
            user("task"),
            call("a"),
            result("a"),
            call("b"),
            result("b"),
            call("c"),
            result("c"),
            reply("done"),
        ];
        let tokens = vec![5, 10, 10, 100, 10, 100, 10, 100, 10];
        let plan = plan_split(&m, &tokens, f, 150u64).unwrap();
        // Tail from call("c") (index 6) = 120 tokens fits; from index 4 it would be 230.
        assert_eq!(plan.tail_start, 6);
        assert_eq!(plan.keep, vec![0, 1, 6, 7, 8], "system and the only user message stay");
        assert_eq!(plan.compact, vec![2, 3, 4, 5]);
        let kept: Vec<&Value> = plan.keep.iter().map(|&i| &m[i]).collect();
        let kept: Vec<Value> = kept.into_iter().cloned().collect();
        assert_eq!(check_pairs(&kept, f), Ok(()));
    }

    #[test]
    fn responses_steps_are_cut_before_their_reasoning_and_developer_messages_stay() {
        let f = MessageFormat::OpenaiResponses;
        let step = |id: &str| {
            [
                json!({"type": "reasoning", "summary": [], "encrypted_content": "sig"}),
                json!({"type": "function_call", "call_id": id, "name": "exec_command", "arguments": "{}"}),
                json!({"type": "function_call_output", "call_id": id, "output": "out"}),
            ]
        };
        let mut m = vec![
            json!({"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "You are Codex."}]}),
            json!({"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "<permissions>"}]}),
            json!({"role": "user", "content": "task"}),
        ];
        m.extend(step("a")); // 3, 4, 5
        m.extend(step("b")); // 6, 7, 8
        m.extend(step("c")); // 9, 10, 11
        m.push(json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "done"}]}));
        let tokens = vec![50, 50, 10, 5, 10, 100, 5, 10, 100, 5, 10, 100, 10];
        // From index 9 the tail holds 125 tokens; from 10 it would be smaller, but the call is
        // not cut from its reasoning, nor an output from its call.
        let plan = plan_split(&m, &tokens, f, 130u64).unwrap();
        assert_eq!(plan.tail_start, 9);
        assert_eq!(
            plan.keep,
            vec![0, 1, 2, 9, 10, 11, 12],
            "developer messages and the task stay"
        );
        assert_eq!(plan.compact, vec![3, 4, 5, 6, 7, 8]);
        let kept: Vec<Value> = plan.keep.iter().map(|&i| m[i].clone()).collect();
        assert_eq!(check_pairs(&kept, f), Ok(()));
        // A step that only reasons and answers is the final answer: no cut before it.
        assert!(!is_split_point(&m, 12, f));
        assert!((3..12).filter(|&k| is_split_point(&m, k, f)).eq([6, 9]));
    }

    #[test]
    fn a_final_answer_stays_with_its_request_and_calls() {
        let f = MessageFormat::Openai;
        let m = vec![
            user("old task"),
            reply("ok"),
            user("task"),
            call("a"),
            result("a"),
            reply("the answer"),
        ];
        // The answer alone would fit the reserve; it is kept with the request and the call.
        let plan = plan_split(&m, &[10, 10, 10, 10, 100, 10], f, 20u64).unwrap();
        assert_eq!(plan.tail_start, 2);
        assert_eq!(plan.compact, vec![0, 1]);
    }

    #[test]
    fn an_oversized_last_turn_is_kept_whole() {
        let m = vec![user("a"), reply("b"), user("huge"), reply("c")];
        let plan = plan_split(&m, &[1, 1, 10_000, 1], MessageFormat::Openai, 10u64).unwrap();
        assert_eq!((plan.tail_start, plan.tail_tokens), (2, 10_001));
        assert_eq!(plan.compact, vec![0, 1]);
    }

    #[test]
    fn a_native_compaction_and_its_step_are_never_compacted() {
        let f = MessageFormat::Anthropic;
        let use_ = |id: &str| json!({"type": "tool_use", "id": id, "name": "Bash", "input": {}});
        let res = |id: &str| json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": "out"}]});
        let m = vec![
            json!({"role": "user", "content": "task"}),
            json!({"role": "assistant", "content": [use_("a")]}),
            res("a"),
            // The provider's summary of 0..2, signed, and a call in the same turn.
            json!({"role": "assistant", "content": [{"type": "compaction", "content": "sum"}, use_("b")]}),
            res("b"),
            json!({"role": "assistant", "content": [use_("c")]}), // 5: first cut after it
            res("c"),
            json!({"role": "assistant", "content": [use_("d")]}),
            res("d"),
        ];
        assert_eq!(fixed_prefix(&m, f), 5);
        let plan = plan_split(&m, &[1, 1, 1, 1, 100, 1, 100, 1, 100], f, 101u64).unwrap();
        assert_eq!(plan.compact, vec![5, 6], "only what follows the native step");
        assert_eq!(plan.keep, vec![0, 1, 2, 3, 4, 7, 8]);
        let kept: Vec<Value> = plan.keep.iter().map(|&i| m[i].clone()).collect();
        assert_eq!(check_pairs(&kept, f), Ok(()));
        // Nothing after the native step can be cut: nothing is compacted.
        assert_eq!(fixed_prefix(&m[..5], f), 5);
        assert_eq!(plan_split(&m[..5], &[1, 1, 1, 1, 100], f, 0u64), None);
        // A Responses compaction item, after the developer instructions.
        let r = vec![
            json!({"type": "message", "role": "developer", "content": "You are Codex."}),
            json!({"type": "message", "role": "user", "content": "task"}),
            json!({"type": "compaction", "encrypted_content": "gAAA"}),
            json!({"type": "message", "role": "user", "content": "next"}),
        ];
        assert_eq!(fixed_prefix(&r, MessageFormat::OpenaiResponses), 3);
        assert_eq!(fixed_prefix(&r[..2], MessageFormat::OpenaiResponses), 1);
    }

    #[test]
    fn system_messages_in_the_middle_stay_and_a_repeated_one_only_once() {
        let f = MessageFormat::Anthropic;
        let system = |t: &str| json!({"role": "system", "content": t});
        let m = vec![
            user("task"),
            system("# Environment: cwd /repo"), // 1: pinned
            reply("a"),
            system("Reminder: use the task tools"), // 3: repeated at 6, not pinned
            user("more"),
            reply("b"),
            system("Reminder: use the task tools"), // 6: pinned
            user("last"),
            reply("c"),
        ];
        let plan = plan_split(&m, &[1, 50, 10, 5, 10, 10, 5, 10, 10], f, 25u64).unwrap();
        assert_eq!(plan.tail_start, 7);
        assert_eq!(plan.compact, vec![0, 2, 3, 4, 5]);
        assert_eq!(plan.keep, vec![1, 6, 7, 8]);
    }

    #[test]
    fn at_most_the_newest_sixteen_system_messages_are_kept() {
        let f = MessageFormat::Openai;
        let mut m = vec![user("task")];
        for i in 0..20 {
            m.push(json!({"role": "system", "content": format!("note {i}")}));
            m.push(reply("ok"));
        }
        m.push(user("last"));
        let tokens = vec![1; m.len()];
        let plan = plan_split(&m, &tokens, f, 1u64).unwrap();
        let kept_notes: Vec<usize> = plan.keep.iter().copied().filter(|&i| i < plan.tail_start).collect();
        assert_eq!(kept_notes.len(), MAX_PINNED_INSTRUCTIONS);
        assert_eq!(
            kept_notes[0], 9,
            "the oldest four are compacted: notes 0-3 at 1, 3, 5, 7"
        );
    }

    #[test]
    fn nothing_to_compact_without_a_split_point() {
        let m = vec![user("only"), call("a"), result("a")];
        // The only split point after the user message is... none: index 1 answers the user.
        assert_eq!(plan_split(&m, &[1, 1, 1], MessageFormat::Openai, 0u64), None);
        assert_eq!(plan_split(&[user("x")], &[5], MessageFormat::Openai, 0u64), None);
    }

    /// `check` for the message minimum: the tail of `m` planned with `reserve` tokens and at
    /// least `min` messages starts at `tail_start` (`None`: nothing can be compacted).
    #[track_caller]
    fn check_keep_recent(m: &[Value], tokens: &[u64], reserve: u64, min: usize, tail_start: Option<usize>) {
        let budget = TailBudget {
            tokens: reserve,
            min_messages: min,
        };
        let plan = plan_split(m, tokens, MessageFormat::Openai, budget);
        assert_eq!(
            plan.as_ref().map(|p| p.tail_start),
            tail_start,
            "reserve {reserve}, min {min}: {plan:?}"
        );
        if let Some(plan) = plan {
            assert!(m.len() - plan.tail_start >= min, "{plan:?}");
            let kept: Vec<Value> = plan.keep.iter().map(|&i| m[i].clone()).collect();
            assert_eq!(check_pairs(&kept, MessageFormat::Openai), Ok(()));
        }
    }

    #[test]
    fn the_tail_keeps_at_least_the_minimum_of_messages() {
        let m = vec![
            user("old"),   // 0
            reply("ok"),   // 1
            user("task"),  // 2
            call("a"),     // 3
            result("a"),   // 4
            call("b"),     // 5
            result("b"),   // 6
            reply("done"), // 7
            user("next"),  // 8
            reply("sure"), // 9
        ];
        let t = vec![10, 10, 10, 10, 500, 10, 500, 10, 10, 10];
        // The reserve alone keeps the last exchange (2 messages).
        check_keep_recent(&m, &t, 30, 0, Some(8));
        check_keep_recent(&m, &t, 30, 2, Some(8));
        // Three messages reach into the tool loop: the tail widens to the next split point
        // before them, the call of `b`, so the call stays with its result.
        check_keep_recent(&m, &t, 30, 3, Some(5));
        check_keep_recent(&m, &t, 30, 5, Some(5));
        // Six reach past that call; `a`'s call answers the task, so the next split point back
        // is the task itself.
        check_keep_recent(&m, &t, 30, 6, Some(2));
        // The reserve still decides when it keeps more than the minimum.
        check_keep_recent(&m, &t, 10_000, 3, Some(2));
        // A minimum only the whole conversation meets: nothing to compact.
        check_keep_recent(&m, &t, 30, 9, None);
        // The config's budget is its reserve and its minimum.
        let mut config = Config::default();
        config.compaction.compact_keep_recent_messages = 3;
        assert_eq!(
            TailBudget::from(&config),
            TailBudget {
                tokens: config.reserve_tokens(),
                min_messages: 3
            }
        );
    }

    /// Random OpenAI/Anthropic/Responses agent conversations: user turns, tool loops, parallel
    /// calls (Responses: after a reasoning item, outputs grouped or interleaved with the calls),
    /// plain replies, a leading `developer` message (Responses), and sometimes a pending call at
    /// the end.
    fn conversation() -> impl Strategy<Value = (Vec<Value>, Vec<u64>, MessageFormat)> {
        let step = prop_oneof![Just(0u8), Just(1u8), Just(2u8), Just(3u8)];
        (prop::collection::vec((step, 1usize..4, 1u64..500), 1..40), 0u8..3, any::<bool>()).prop_map(
            |(steps, format, pending)| {
                let format = [MessageFormat::Openai, MessageFormat::Anthropic, MessageFormat::OpenaiResponses][usize::from(format)];
                let mut m = vec![json!({"role": "user", "content": "task"})];
                let mut t = vec![20];
                if format == MessageFormat::OpenaiResponses {
                    m.insert(0, json!({"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "be careful"}]}));
                    t.insert(0, 50);
                }
                let mut id = 0;
                for (kind, calls, size) in steps {
                    match (kind, format) {
                        (0, _) => {
                            // A user turn needs the previous assistant turn to be closed.
                            if role(m.last().unwrap()) != Some("user") || has_tool_result(m.last().unwrap(), format) {
                                if has_tool_result(m.last().unwrap(), format) {
                                    m.push(json!({"role": "assistant", "content": "ok"}));
                                    t.push(3);
                                }
                                m.push(json!({"role": "user", "content": "more"}));
                                t.push(size);
                            }
                        }
                        (_, MessageFormat::Openai) => {
                            let ids: Vec<String> = (0..calls).map(|_| { id += 1; format!("c{id}") }).collect();
                            m.push(json!({"role": "assistant", "tool_calls": ids.iter().map(|i| json!({"id": i, "type": "function", "function": {"name": "bash", "arguments": "{}"}})).collect::<Vec<_>>()}));
                            t.push(10);
                            for i in ids {
                                m.push(json!({"role": "tool", "tool_call_id": i, "content": "x"}));
                                t.push(size);
                            }
                        }
                        (kind, MessageFormat::OpenaiResponses) => {
                            let ids: Vec<String> = (0..calls).map(|_| { id += 1; format!("c{id}") }).collect();
                            m.push(json!({"type": "reasoning", "summary": [], "encrypted_content": "sig"}));
                            t.push(5);
                            let interleaved = kind == 2;
                            for i in &ids {
                                m.push(json!({"type": "function_call", "call_id": i, "name": "exec_command", "arguments": "{}"}));
                                t.push(10);
                                if interleaved {
                                    m.push(json!({"type": "function_call_output", "call_id": i, "output": "x"}));
                                    t.push(size);
                                }
                            }
                            for i in ids.iter().filter(|_| !interleaved) {
                                m.push(json!({"type": "function_call_output", "call_id": i, "output": "x"}));
                                t.push(size);
                            }
                        }
                        (_, MessageFormat::Anthropic) => {
                            let ids: Vec<String> = (0..calls).map(|_| { id += 1; format!("c{id}") }).collect();
                            m.push(json!({"role": "assistant", "content": ids.iter().map(|i| json!({"type": "tool_use", "id": i, "name": "bash", "input": {}})).collect::<Vec<_>>()}));
                            t.push(10);
                            m.push(json!({"role": "user", "content": ids.iter().map(|i| json!({"type": "tool_result", "tool_use_id": i, "content": "x"})).collect::<Vec<_>>()}));
                            t.push(size);
                        }
                    }
                }
                if pending && format == MessageFormat::OpenaiResponses && role(m.last().unwrap()) == Some("user") {
                    m.push(json!({"type": "function_call", "call_id": "pending", "name": "exec_command", "arguments": "{}"}));
                    t.push(10);
                } else if pending && role(m.last().unwrap()) == Some("user") {
                    m.push(json!({"role": "assistant", "tool_calls": [{"id": "pending", "type": "function", "function": {"name": "bash", "arguments": "{}"}}], "content": [{"type": "tool_use", "id": "pending", "name": "bash", "input": {}}]}));
                    t.push(10);
                }
                (m, t, format)
            },
        )
    }

    proptest! {
        #[test]
        fn splits_keep_pairs_turns_and_the_newest_user_message(
            (m, t, f) in conversation(),
            reserve in 0u64..3000,
            min in prop_oneof![Just(0usize), 0usize..12],
        ) {
            prop_assert_eq!(check_pairs(&m, f), Ok(()));
            let budget = TailBudget { tokens: reserve, min_messages: min };
            let Some(plan) = plan_split(&m, &t, f, budget) else {
                // Nothing compactable: no split point keeps the minimum and leaves something
                // before it to compact.
                return Ok(());
            };
            prop_assert!(m.len() - plan.tail_start >= min, "the tail holds the minimum");
            let mut all: Vec<usize> = plan.compact.iter().chain(&plan.keep).copied().collect();
            all.sort_unstable();
            prop_assert_eq!(all, (0..m.len()).collect::<Vec<_>>(), "every message is compacted or kept, once");
            prop_assert!(plan.keep.windows(2).all(|w| w[0] < w[1]));
            let kept: Vec<Value> = plan.keep.iter().map(|&i| m[i].clone()).collect();
            prop_assert_eq!(check_pairs(&kept, f), Ok(()), "kept messages keep their pairs");
            let compacted: Vec<Value> = plan.compact.iter().map(|&i| m[i].clone()).collect();
            prop_assert_eq!(check_pairs(&compacted, f), Ok(()), "compacted messages keep their pairs");
            let newest_user = m.iter().rposition(|x| is_user_turn(x, f)).unwrap();
            prop_assert!(plan.keep.contains(&newest_user));
            // The tail starts at a boundary: a user turn, or an assistant message after results.
            prop_assert!(is_split_point(&m, plan.tail_start, f));
            // An assistant reply is never kept without the user message it answers, nor a final
            // answer without the calls that led to it.
            if role(&m[plan.tail_start]) == Some("assistant") {
                prop_assert!(has_tool_result(&m[plan.tail_start - 1], f));
                let step = m[plan.tail_start..].iter().take_while(|x| role(x) == Some("assistant"));
                prop_assert!(step.clone().any(|x| !tool_calls(x, f).is_empty()));
            }
            // The tail fits the reserve unless no valid split point would.
            let tail: u64 = t[plan.tail_start..].iter().sum();
            prop_assert_eq!(tail, plan.tail_tokens);
            if tail > reserve {
                prop_assert!(
                    (plan.tail_start + 1..m.len()).all(|k| !is_split_point(&m, k, f) || m.len() - k < min),
                    "a later split point keeping the minimum existed"
                );
            }
            // The minimum changes nothing when the reserve's tail already holds it.
            if let Some(free) = plan_split(&m, &t, f, reserve).filter(|p| m.len() - p.tail_start >= min) {
                prop_assert_eq!(plan.tail_start, free.tail_start, "a tail long enough already is not widened");
            }
        }
    }
}
