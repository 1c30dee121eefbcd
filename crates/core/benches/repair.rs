//! What the repair pass costs: `repair::repair` runs on every outgoing list (each
//! `context.prepare`), so it must stay linear and cheap for valid lists. Measured on OpenAI Chat,
//! Anthropic and OpenAI Responses agent loops of 1k/4k/16k messages (Responses: items), valid ones (returned untouched) and ones with four
//! unanswered calls and four orphan results, with messages borrowed as the daemon passes them;
//! `owned_*` passes owned `Value`s instead (cloned outside the timing).
//! Run: `cargo bench -p satchel-core --bench repair`.

use divan::Bencher;
use divan::counter::ItemsCount;
use satchel_core::format::MessageFormat;
use satchel_core::repair::{RepairItem, repair};
use serde_json::{Value, json};

fn main() {
    divan::main();
}

const SIZES: [usize; 3] = [1_000, 4_000, 16_000];

/// Samples per case: enough for a stable median, few enough to keep the run short.
const SAMPLES: u32 = 40;

/// How many calls lose their result, and how many foreign results are added, when broken.
const BREAKS: usize = 4;

/// One assistant turn: its text, its calls (id, command, result) and an optional user reply.
struct Turn {
    text: String,
    calls: Vec<(String, String, String)>,
    reply: Option<String>,
    /// Broken lists: the last call of this turn gets no result.
    unanswered: bool,
    /// Broken lists: a result for a call nobody made follows this turn's results.
    orphan: Option<String>,
}

/// Turns of a coding-agent loop; every third turn makes two parallel calls, every tenth is
/// text only and gets a user reply.
fn turns(messages: usize, broken: bool) -> Vec<Turn> {
    // ~2.5 messages per turn on average; generate enough and let the caller cut.
    let count = messages / 2 + 8;
    let mut turns: Vec<Turn> = (0..count)
        .map(|t| {
            let calls = match t % 10 {
                9 => 0,
                k if k % 3 == 0 => 2,
                _ => 1,
            };
            Turn {
                text: format!(
                    "Let me check step {t}: the parser drops the last token in src/lexer_{}.rs.",
                    t % 17
                ),
                calls: (0..calls)
                    .map(|c| {
                        (
                            format!("call_{t}_{c}"),
                            format!("cargo test -p crate_{} -- case_{t}", t % 5),
                            format!("running 3 tests\ntest case_{t} ... ok\ntest result: ok. 3 passed; 0 failed\n"),
                        )
                    })
                    .collect(),
                reply: (t % 10 == 9).then(|| format!("Looks right, go on with part {t}.")),
                unanswered: false,
                orphan: None,
            }
        })
        .collect();
    if broken {
        // Within the first half, which the cut to `messages` always keeps.
        let stride = count / (2 * (BREAKS + 1));
        for b in 1..=BREAKS {
            // Parallel turns are the multiples of 3 (not 9 mod 10): find one near the mark.
            let at = (b * stride..count)
                .find(|&t| turns[t].calls.len() == 2)
                .expect("a parallel turn");
            turns[at].unanswered = true;
            let near = (b * stride + stride / 2..count)
                .find(|&t| !turns[t].calls.is_empty())
                .expect("a call turn");
            turns[near].orphan = Some(format!("call_ghost_{b}"));
        }
    }
    turns
}

fn openai(n: usize, broken: bool) -> Vec<Value> {
    let mut messages = vec![
        json!({"role": "system", "content": "You are a coding agent working in /work/repo."}),
        json!({"role": "user", "content": "Fix the failing lexer tests and keep the public API unchanged."}),
    ];
    for turn in turns(n, broken) {
        if turn.calls.is_empty() {
            messages.push(json!({"role": "assistant", "content": turn.text}));
        } else {
            let calls: Vec<Value> = turn
                .calls
                .iter()
                .map(|(id, command, _)| {
                    json!({"id": id, "type": "function", "function": {
                        "name": "bash", "arguments": json!({"command": command}).to_string()}})
                })
                .collect();
            messages.push(json!({"role": "assistant", "content": turn.text, "tool_calls": calls}));
        }
        let answered = turn.calls.len() - usize::from(turn.unanswered);
        for (id, _, result) in &turn.calls[..answered] {
            messages.push(json!({"role": "tool", "tool_call_id": id, "content": result}));
        }
        if let Some(ghost) = &turn.orphan {
            messages.push(json!({"role": "tool", "tool_call_id": ghost, "content": "stale output"}));
        }
        if let Some(reply) = turn.reply {
            messages.push(json!({"role": "user", "content": reply}));
        }
        if messages.len() >= n {
            break;
        }
    }
    messages.truncate(n);
    messages
}

fn anthropic(n: usize, broken: bool) -> Vec<Value> {
    let mut messages = vec![json!({"role": "user", "content": [
        {"type": "text", "text": "Fix the failing lexer tests and keep the public API unchanged."}]})];
    for turn in turns(n, broken) {
        let mut blocks = vec![json!({"type": "text", "text": turn.text})];
        blocks.extend(turn.calls.iter().map(
            |(id, command, _)| json!({"type": "tool_use", "id": id, "name": "bash", "input": {"command": command}}),
        ));
        messages.push(json!({"role": "assistant", "content": blocks}));
        let answered = turn.calls.len() - usize::from(turn.unanswered);
        let mut user: Vec<Value> = turn.calls[..answered]
            .iter()
            .map(|(id, _, result)| {
                json!({"type": "tool_result", "tool_use_id": id, "content": [{"type": "text", "text": result}]})
            })
            .collect();
        if let Some(ghost) = &turn.orphan {
            user.push(json!({"type": "tool_result", "tool_use_id": ghost, "content": "stale output"}));
        }
        if let Some(reply) = turn.reply {
            user.push(json!({"type": "text", "text": reply}));
        }
        messages.push(json!({"role": "user", "content": user}));
        if messages.len() >= n {
            break;
        }
    }
    messages.truncate(n);
    messages
}

/// Responses items as Codex sends them: a reasoning item, the text and one item per call, then
/// the outputs.
fn responses(n: usize, broken: bool) -> Vec<Value> {
    let mut items = vec![
        json!({"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "You are a coding agent working in /work/repo."}]}),
        json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Fix the failing lexer tests and keep the public API unchanged."}]}),
    ];
    // About 4.7 items a turn, twice a chat turn's messages: half the turns fill the list, and
    // the breaks, in the first half of the turns, stay inside it.
    for turn in turns(n / 2, broken) {
        items.push(json!({"type": "reasoning", "summary": [], "encrypted_content": "gAAAAB-opaque-signed-reasoning"}));
        items.push(
            json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": turn.text}]}),
        );
        items.extend(turn.calls.iter().map(|(id, command, _)| {
            json!({"type": "function_call", "call_id": id, "name": "exec_command", "arguments": json!({"cmd": command}).to_string()})
        }));
        let answered = turn.calls.len() - usize::from(turn.unanswered);
        for (id, _, result) in &turn.calls[..answered] {
            items.push(json!({"type": "function_call_output", "call_id": id, "output": result}));
        }
        if let Some(ghost) = &turn.orphan {
            items.push(json!({"type": "function_call_output", "call_id": ghost, "output": "stale output"}));
        }
        if let Some(reply) = turn.reply {
            items.push(json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": reply}]}));
        }
        if items.len() >= n {
            break;
        }
    }
    items.truncate(n);
    items
}

/// Gives every call a file body of `bytes` in its arguments, as agents that write files through
/// tool calls (`write_file`, `str_replace_editor`) send them.
fn with_file_bodies(mut messages: Vec<Value>, bytes: usize) -> Vec<Value> {
    let body = "    let token = self.next_token(pos)?;\n".repeat(bytes / 38 + 1);
    for message in &mut messages {
        if let Some(calls) = message.get_mut("tool_calls").and_then(Value::as_array_mut) {
            for call in calls {
                let args = &mut call["function"]["arguments"];
                let mut parsed: Value = serde_json::from_str(args.as_str().unwrap_or("{}")).unwrap_or_default();
                parsed["content"] = Value::from(body.as_str());
                *args = Value::from(parsed.to_string());
            }
        }
        if message["type"] == "function_call" {
            let args = &mut message["arguments"];
            let mut parsed: Value = serde_json::from_str(args.as_str().unwrap_or("{}")).unwrap_or_default();
            parsed["content"] = Value::from(body.as_str());
            *args = Value::from(parsed.to_string());
        }
        if let Some(blocks) = message.get_mut("content").and_then(Value::as_array_mut) {
            for block in blocks.iter_mut().filter(|b| b["type"] == "tool_use") {
                block["input"]["content"] = Value::from(body.as_str());
            }
        }
    }
    messages
}

/// A message borrowed from the caller until the pass must change it, as the daemon hands in its
/// cached renderings (`Outgoing` in `crates/satchel/src/session.rs`).
enum Item<'a> {
    Borrowed(&'a Value),
    Owned(Value),
}

impl RepairItem for Item<'_> {
    fn value(&self) -> &Value {
        match self {
            Item::Borrowed(value) => value,
            Item::Owned(value) => value,
        }
    }

    fn into_value(self) -> Value {
        match self {
            Item::Borrowed(value) => value.clone(),
            Item::Owned(value) => value,
        }
    }

    fn from_value(value: Value) -> Self {
        Item::Owned(value)
    }
}

/// The daemon's path: borrowed messages, so a valid list is passed through without copies.
fn bench_borrowed(bencher: Bencher, messages: Vec<Value>, format: MessageFormat, broken: bool) {
    let (_, repairs) = repair(messages.iter().map(Item::Borrowed).collect(), format, true);
    // The inputs are what they claim to be.
    assert_eq!(repairs.len(), if broken { 2 * BREAKS } else { 0 }, "{repairs:?}");
    bencher
        .counter(ItemsCount::new(messages.len()))
        .with_inputs(|| messages.iter().map(Item::Borrowed).collect::<Vec<_>>())
        .bench_values(|items| repair(items, format, true));
}

/// Owned `Value`s (the other `RepairItem`): the list is cloned outside the timing.
fn bench_owned(bencher: Bencher, messages: Vec<Value>, format: MessageFormat) {
    bencher
        .counter(ItemsCount::new(messages.len()))
        .with_inputs(|| messages.clone())
        .bench_values(|messages| repair(messages, format, true));
}

/// Valid OpenAI lists: the common case, returned untouched.
#[divan::bench(args = SIZES, sample_count = SAMPLES)]
fn openai_valid(bencher: Bencher, n: usize) {
    bench_borrowed(bencher, openai(n, false), MessageFormat::Openai, false);
}

/// OpenAI lists with four unanswered calls and four orphan results.
#[divan::bench(args = SIZES, sample_count = SAMPLES)]
fn openai_broken(bencher: Bencher, n: usize) {
    bench_borrowed(bencher, openai(n, true), MessageFormat::Openai, true);
}

/// Valid Anthropic lists (results first in alternating user messages).
#[divan::bench(args = SIZES, sample_count = SAMPLES)]
fn anthropic_valid(bencher: Bencher, n: usize) {
    bench_borrowed(bencher, anthropic(n, false), MessageFormat::Anthropic, false);
}

/// Anthropic lists with four unanswered calls and four orphan results.
#[divan::bench(args = SIZES, sample_count = SAMPLES)]
fn anthropic_broken(bencher: Bencher, n: usize) {
    bench_borrowed(bencher, anthropic(n, true), MessageFormat::Anthropic, true);
}

/// Valid Responses lists (reasoning, text and call items, then outputs).
#[divan::bench(args = SIZES, sample_count = SAMPLES)]
fn responses_valid(bencher: Bencher, n: usize) {
    bench_borrowed(bencher, responses(n, false), MessageFormat::OpenaiResponses, false);
}

/// Responses lists with four unanswered calls and four orphan outputs.
#[divan::bench(args = SIZES, sample_count = SAMPLES)]
fn responses_broken(bencher: Bencher, n: usize) {
    bench_borrowed(bencher, responses(n, true), MessageFormat::OpenaiResponses, true);
}

/// Valid OpenAI lists as owned values.
#[divan::bench(args = SIZES, sample_count = SAMPLES)]
fn owned_openai_valid(bencher: Bencher, n: usize) {
    bench_owned(bencher, openai(n, false), MessageFormat::Openai);
}

/// Valid Anthropic lists as owned values.
#[divan::bench(args = SIZES, sample_count = SAMPLES)]
fn owned_anthropic_valid(bencher: Bencher, n: usize) {
    bench_owned(bencher, anthropic(n, false), MessageFormat::Anthropic);
}

/// Valid lists of 4,000 messages whose calls each carry a 4 KB file body: the pass only needs
/// the call ids, so its cost should not grow with the arguments.
#[divan::bench(args = [MessageFormat::Openai, MessageFormat::Anthropic, MessageFormat::OpenaiResponses], sample_count = SAMPLES)]
fn valid_4k_with_4kb_call_bodies(bencher: Bencher, format: MessageFormat) {
    let messages = match format {
        MessageFormat::Openai => openai(4_000, false),
        MessageFormat::Anthropic => anthropic(4_000, false),
        MessageFormat::OpenaiResponses => responses(4_000, false),
    };
    bench_borrowed(bencher, with_file_bodies(messages, 4_096), format, false);
}
