//! A provider-native compaction in the history (Anthropic's `compaction` block): what comes
//! before it costs nothing, since the provider drops it, and it is sent as it came; satchel
//! compacts only what follows it, and its summary goes after it.

use satchel_protocol::Action;

use super::*;

fn task() -> Value {
    json!({"role": "user", "content": "Fix the parser. Never touch the public API."})
}

/// One Bash round of the loop: a call and its output of about `bytes` bytes.
fn round(id: &str, bytes: usize) -> [Value; 2] {
    let line = format!("{id}: test parser::case … ok\n");
    [
        json!({"role": "assistant", "content": [{"type": "tool_use", "id": id, "name": "Bash",
               "input": {"command": format!("cargo test {id}")}}]}),
        json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": id,
               "content": line.repeat(bytes / line.len())}]}),
    ]
}

fn native_compaction() -> Value {
    json!({"role": "assistant", "content": [
        {"type": "compaction", "content": "The user asked to fix the parser; rounds 0-7 ran the tests."},
        {"type": "text", "text": "Continuing."}]})
}

fn history(before: usize, after: usize) -> Vec<Value> {
    let mut messages = vec![task()];
    (0..before).for_each(|i| messages.extend(round(&format!("toolu_b{i}"), 3_000)));
    messages.push(native_compaction());
    messages.push(json!({"role": "user", "content": "go on"}));
    (0..after).for_each(|i| messages.extend(round(&format!("toolu_a{i}"), 3_000)));
    messages
}

fn compacted(result: &Prepared) -> Option<&satchel_protocol::CompactionReport> {
    result.actions.iter().find_map(|a| match a {
        Action::Compacted(report) => Some(report),
        _ => None,
    })
}

#[test]
fn what_precedes_a_native_compaction_is_not_counted_and_the_item_is_sent_as_it_came() {
    let harness = Harness::new(small_window());
    let messages = history(8, 1);
    let result = harness.prepare(&messages);
    assert!(
        compacted(&result).is_none(),
        "the provider drops the 8 rounds: no compaction"
    );
    assert!(
        result.tokens.total < harness.config.compact_threshold_tokens(),
        "{} tokens counted",
        result.tokens.total
    );
    let sent = returned(&result);
    assert_eq!(sent.len(), messages.len(), "nothing left out");
    assert_eq!(sent[17], native_compaction(), "the native item is sent as it came");

    // The same history without the native item is over the window and compacts.
    let plain = Harness::new(small_window());
    let mut without = messages.clone();
    without[17] = json!({"role": "assistant", "content": [{"type": "text", "text": "Continuing."}]});
    assert!(compacted(&plain.prepare(&without)).is_some());
}

#[test]
fn only_what_follows_a_native_compaction_is_compacted_and_the_summary_follows_it() {
    let harness = Harness::new(small_window());
    let messages = history(3, 8);
    let result = harness.prepare(&messages);
    let report = compacted(&result).expect("the rounds after the native item fill the window");
    let sent = returned(&result);
    // Everything up to the native step is sent as it came, in place.
    let native_at = sent.iter().position(|m| m == &native_compaction()).expect("sent");
    assert_eq!(native_at, 7);
    assert_eq!(sent[0]["content"], task()["content"], "the task stays first");
    // The summary is merged into the user turn that follows the native item.
    let after = &sent[native_at + 1];
    assert_eq!(after["role"], "user");
    let summary = after["content"][0]["text"].as_str().expect("a summary block");
    assert!(summary.contains("`cargo test toolu_a0` succeeded"), "{summary}");
    assert!(
        !summary.contains("toolu_b"),
        "what the provider summarised is not summarised again"
    );
    assert_eq!(after["content"][1]["text"], "go on");
    // The compacted rounds were all after it: the archive holds them, none from before.
    let archived: Vec<String> = harness.archive().iter().map(|line| line.to_string()).collect();
    assert!(archived.iter().any(|l| l.contains("toolu_a0")));
    assert!(
        !archived.iter().any(|l| l.contains("toolu_b")),
        "rounds before the native item stay"
    );
    assert!(report.messages >= 2);
    satchel_core::format::check_pairs(&sent, satchel_core::format::MessageFormat::Anthropic).expect("pairs intact");
}
