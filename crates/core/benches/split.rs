//! The compaction split is one backward pass: time grows linearly with the messages kept.
//! The peer's suffix search is quadratic (16 s at 4,000 kept messages, `../shared/notes/peer-reme.md`).
//! Run: `cargo bench -p satchel-core --bench split`.

use satchel_core::compact::plan_split;
use satchel_core::format::MessageFormat;
use serde_json::{Value, json};

fn main() {
    divan::main();
}

/// An agent loop of `n` messages: one task, then assistant calls and tool results.
fn agent_loop(n: usize) -> (Vec<Value>, Vec<u64>) {
    let mut messages = vec![json!({"role": "user", "content": "task"})];
    let mut i = 0;
    while messages.len() < n {
        i += 1;
        let id = format!("call_{i}");
        messages.push(json!({"role": "assistant", "content": null, "tool_calls": [{"id": id, "type": "function", "function": {"name": "bash", "arguments": "{}"}}]}));
        messages.push(json!({"role": "tool", "tool_call_id": id, "content": "ok"}));
    }
    let tokens = vec![25; messages.len()];
    (messages, tokens)
}

/// Everything but the first message fits the reserve, so the whole list is scanned: the
/// worst case for the peer (all messages kept).
#[divan::bench(args = [1_000, 4_000, 16_000, 64_000])]
fn plan_split_keeping_everything(bencher: divan::Bencher, n: usize) {
    let (messages, tokens) = agent_loop(n);
    let reserve = 25 * n as u64;
    bencher.bench(|| plan_split(divan::black_box(&messages), &tokens, MessageFormat::Openai, reserve));
}
