//! `cache_stable_prefix_tokens` and the batched recent window: `check_prefix` replays a
//! conversation one message per call and snapshots, per call, the request's size, the tokens
//! it shares with the previous request from the start, and whether it extends that request
//! whole (a provider's prompt cache then reuses all of it).

use satchel_protocol::Action;

use super::*;

/// One call of a replay: its total tokens, its stable prefix, whether the previous request is
/// a prefix of it, and whether it compacted.
struct Step {
    total: u64,
    prefix: u64,
    extends: bool,
    compacted: bool,
}

/// Replays `messages` one per call under `config` (the first creates the session), checks
/// the invariants of the stable prefix, and snapshots the steps as `name`. Returns them.
fn check_prefix(config: Config, messages: &[Value], name: &str) -> Vec<Step> {
    let harness = Harness::new(config);
    let mut steps: Vec<Step> = Vec::new();
    let mut previous: Option<Vec<Value>> = None;
    for i in 0..messages.len() {
        let result = if i == 0 {
            harness.prepare(&messages[..1])
        } else {
            harness.append(&messages[i..=i])
        };
        let now = returned(&result);
        let extends = previous
            .as_ref()
            .is_some_and(|before| now.len() >= before.len() && now[..before.len()] == before[..]);
        let step = Step {
            total: result.tokens.total,
            prefix: result.cache_stable_prefix_tokens,
            extends,
            compacted: result.actions.iter().any(|a| matches!(a, Action::Compacted(_))),
        };
        match steps.last() {
            None => assert_eq!(step.prefix, 0, "the first request has nothing to reuse"),
            // The whole previous request is reused: its every token.
            Some(before) if extends => assert_eq!(step.prefix, before.total, "call {i}"),
            Some(before) => assert!(step.prefix < before.total, "call {i}"),
        }
        assert!(step.prefix <= step.total, "call {i}");
        steps.push(step);
        previous = Some(now);
    }
    let table: Vec<String> = steps
        .iter()
        .enumerate()
        .map(|(i, s)| {
            format!(
                "{i:>2} total {:>5} prefix {:>5} {}{}",
                s.total,
                s.prefix,
                if s.extends { "extends" } else { "breaks" },
                if s.compacted { " compacted" } else { "" }
            )
        })
        .collect();
    insta::assert_snapshot!(name, table.join("\n"));
    steps
}

/// Calls whose request does not extend the previous one whole (the first included).
fn breaks(steps: &[Step]) -> usize {
    steps.iter().filter(|s| !s.extends).count()
}

/// Outputs over the old-phase limit (3 000 bytes) and under the recent one: each changes the
/// request where it leaves the recent window.
fn tool_loop() -> Vec<Value> {
    conversation(8, 4_000)
}

fn estimate(batch: usize) -> Config {
    let mut config = Config::default();
    config.tokens.tokenizer = Tokenizer::Estimate;
    config.render.offload_notice_path = OffloadNoticePath::Relative;
    config.recent.pruning_phase_batch = batch;
    config
}

#[test]
fn moving_the_window_with_every_message_breaks_the_prefix_at_each_output() {
    let steps = check_prefix(estimate(1), &tool_loop(), "prefix_batch_1");
    // Each output that leaves the recent window (two messages after it came) is cut again:
    // the first seven; the last is still recent.
    assert_eq!(breaks(&steps), 1 + 7);
}

#[test]
fn a_batched_window_keeps_the_prefix_between_its_steps() {
    let steps = check_prefix(estimate(8), &tool_loop(), "prefix_batch_8");
    // 17 messages: the boundary moves at lengths 8 and 16 only.
    assert_eq!(breaks(&steps), 1 + 2);
    assert!(steps.iter().all(|s| !s.compacted));
}

#[test]
fn a_compaction_leaves_little_of_the_prefix() {
    let mut config = small_window();
    config.recent.pruning_phase_batch = 8;
    let mut messages = vec![json!({"role": "system", "content": "You are a coding agent."})];
    messages.extend(conversation(10, 2_500));
    let steps = check_prefix(config, &messages, "prefix_compaction");
    let compacted: Vec<&Step> = steps.iter().filter(|s| s.compacted).collect();
    assert!(!compacted.is_empty());
    for step in compacted {
        // Only the system message before the new summary is reused.
        assert!(step.prefix < 20, "{}", step.prefix);
    }
}

#[test]
fn an_anthropic_summary_merged_into_the_first_user_turn_counts_with_it() {
    // The summary goes into the first user turn kept after a compaction; a long task message
    // there must count in the prefix of the calls that follow.
    let mut messages = vec![json!({"role": "user", "content": "Fix the parser. ".repeat(200)})];
    for turn in 0..10 {
        let id = format!("toolu_{turn:02}");
        messages.push(json!({"role": "assistant", "content": [
            {"type": "tool_use", "id": id, "name": "bash", "input": {"command": format!("cargo test module_{turn}")}}]}));
        messages.push(json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": id, "content": big_output(turn, 2_500)}]}));
        if turn % 3 == 2 {
            messages.push(json!({"role": "assistant", "content": "Still failing."}));
            messages.push(json!({"role": "user", "content": format!("Keep going with module {turn}. ").repeat(40)}));
        }
    }
    let mut config = small_window();
    config.recent.pruning_phase_batch = 8;
    let steps = check_prefix(config, &messages, "prefix_anthropic_merged_summary");
    assert!(steps.iter().any(|s| s.compacted));
}

/// Parallel 60 KB results, then a long agent loop with compactions, one message per call: a
/// result that left the recent window never comes back to it (its excerpt would grow and
/// rewrite the cached prefix), whatever compactions and batch boundaries do to the window.
#[test]
fn a_result_that_left_the_recent_window_never_grows_back() {
    let mut config = Config::default();
    config.window.max_input_length = 24_576;
    config.tokens.tokenizer = Tokenizer::Estimate;
    config.render.offload_notice_path = OffloadNoticePath::Relative;
    let harness = Harness::new(config);
    let mut messages = vec![user("Run the suites and summarise the failures.")];
    for round in 0..6 {
        let ids: Vec<String> = (0..5).map(|i| format!("p{round}_{i}")).collect();
        let calls: Vec<Value> = ids
            .iter()
            .map(|id| json!({"id": id, "type": "function", "function": {"name": "bash", "arguments": "{\"command\":\"make test\"}"}}))
            .collect();
        messages.push(json!({"role": "assistant", "content": null, "tool_calls": calls}));
        for (i, id) in ids.iter().enumerate() {
            messages.push(output(id, &big_output(round * 10 + i, 60_000)));
        }
        for turn in 0..3 {
            let id = format!("t{round}_{turn}");
            messages.push(run(&id, &format!("cargo check -p module_{turn}")));
            messages.push(output(&id, &big_output(100 + turn, 800)));
        }
    }
    // Per tool call: the smallest size its result was sent at so far.
    let mut smallest: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    let mut compactions = 0;
    for i in 0..messages.len() {
        let result = if i == 0 {
            harness.prepare(&messages[..1])
        } else {
            harness.append(&messages[i..=i])
        };
        compactions += result
            .actions
            .iter()
            .filter(|a| matches!(a, Action::Compacted(_)))
            .count();
        for sent in returned(&result).iter().filter(|m| m["role"] == "tool") {
            let id = sent["tool_call_id"].as_str().unwrap().to_owned();
            let size = sent.to_string().len();
            if let Some(&before) = smallest.get(&id) {
                assert!(
                    size <= before,
                    "after call {i}, the result of {id} grew from {before} to {size} bytes"
                );
            }
            let entry = smallest.entry(id).or_insert(size);
            *entry = (*entry).min(size);
        }
    }
    assert!(compactions >= 2, "the loop compacts: {compactions}");
}
