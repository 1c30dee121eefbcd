//! Transient pruning, rule by rule: one `check(case, snapshot)` helper prunes a request and
//! compares the pruned messages with their snapshot in `snapshots/` (insta; run with
//! `INSTA_UPDATE=always` to write new ones, then read the diff), after checking the
//! invariants every pruning keeps ([`invariants`]). Property tests are in [`props`].

mod props;

use satchel_protocol::config::Tokenizer;
use serde_json::{Value, json};

use super::*;
use crate::format::{check_pairs, result_ids, tool_call_ids};
use crate::tokens::TokenCounter;

/// Stub length in these tests: short, so snapshots stay readable.
const STUB: usize = 20;
/// Tokens of the system prompt and tools, which pruning cannot reduce.
const EXTRAS: u64 = 100;
/// Strings longer than this are shown abbreviated in snapshots.
const SHOWN_BYTES: usize = 200;

fn counter() -> TokenCounter {
    TokenCounter::new(Tokenizer::Estimate, 4.0)
}

/// A request to prune.
struct Case {
    messages: Vec<Value>,
    format: MessageFormat,
    /// (position, pointer, file) of the texts with an offload file.
    offloaded: Vec<(usize, String, String)>,
    protected_turns: usize,
    stub_chars: usize,
    /// `None`: prune everything prunable.
    target: Option<u64>,
}

impl Case {
    fn new(format: MessageFormat, messages: Vec<Value>) -> Self {
        Case {
            messages,
            format,
            offloaded: Vec::new(),
            protected_turns: 1,
            stub_chars: STUB,
            target: None,
        }
    }

    /// Gives the results of the calls `ids` offload files `tool_result/<id>.txt`.
    fn offload(mut self, ids: &[&str]) -> Self {
        for (position, message) in self.messages.iter().enumerate() {
            for text in result_texts(message, self.format) {
                if let Some(id) = text.call_id.filter(|id| ids.contains(&id.as_str())) {
                    self.offloaded
                        .push((position, text.pointer, format!("tool_result/{id}.txt")));
                }
            }
        }
        self
    }

    fn protect(mut self, turns: usize) -> Self {
        self.protected_turns = turns;
        self
    }

    fn target(mut self, target: u64) -> Self {
        self.target = Some(target);
        self
    }

    fn tokens(&self) -> Vec<u64> {
        self.messages.iter().map(|m| counter().count_message(m)).collect()
    }

    fn total(&self) -> u64 {
        EXTRAS + self.tokens().iter().sum::<u64>()
    }

    fn prune(&self) -> Pruned {
        let texts: Vec<PrunableText<'_>> = self
            .offloaded
            .iter()
            .map(|(position, pointer, file)| PrunableText {
                position: *position,
                pointer,
                file,
                stats: TextStats::of(
                    self.messages[*position]
                        .pointer(pointer)
                        .and_then(Value::as_str)
                        .unwrap_or(""),
                ),
            })
            .collect();
        let tokens = self.tokens();
        let request = PruneRequest {
            messages: &self.messages,
            format: self.format,
            offloaded: &texts,
            tokens: &tokens,
            total: self.total(),
            target: self.target.unwrap_or(0),
            plan: PrunePlan {
                protected_turns: self.protected_turns,
                stub_chars: self.stub_chars,
            },
        };
        let counter = counter();
        prune_for_request(&request, |m| counter.count_message(m))
    }
}

/// What every pruning keeps: the same messages, roles, tool ids and pairing; nothing
/// protected or unchanged is replaced; no replacement is empty or bigger; the new total is
/// the recount, and pruning stopped at the first message that reached the target.
fn invariants(case: &Case, pruned: &Pruned) {
    let boundary = protected_start(&case.messages, case.format, case.protected_turns);
    let mut after = case.messages.clone();
    pruned.clone().apply(&mut after);
    assert_eq!(after.len(), case.messages.len());
    for (old, new) in case.messages.iter().zip(&after) {
        assert_eq!(old.get("role"), new.get("role"));
        assert_eq!(tool_call_ids(old, case.format), tool_call_ids(new, case.format));
        assert_eq!(result_ids(old, case.format), result_ids(new, case.format));
    }
    assert_eq!(
        check_pairs(&case.messages, case.format).is_ok(),
        check_pairs(&after, case.format).is_ok()
    );
    let tokens = case.tokens();
    for r in &pruned.replacements {
        assert!(r.position < boundary, "message {} is protected", r.position);
        assert_ne!(
            r.message, case.messages[r.position],
            "message {} did not change",
            r.position
        );
        assert!(r.tokens < tokens[r.position], "message {} grew", r.position);
        assert!(
            !is_assistant(&r.message) || !is_empty_reply(&r.message),
            "message {} is empty",
            r.position
        );
        assert_eq!(r.tokens, counter().count_message(&r.message));
    }
    let recount = EXTRAS + after.iter().map(|m| counter().count_message(m)).sum::<u64>();
    assert_eq!(pruned.report.tokens_after, recount);
    assert_eq!(pruned.report.tokens_before, case.total());
    assert!(pruned.report.tokens_after <= pruned.report.tokens_before);
    let target = case.target.unwrap_or(0);
    if let Some(last) = pruned.replacements.last() {
        let before_last = pruned.report.tokens_after + tokens[last.position] - last.tokens;
        assert!(before_last > target, "pruning went on after reaching the target");
    }
}

/// Prunes `case`, checks the invariants, and compares the pruned request with the snapshot `name`.
fn check(case: &Case, name: &str) -> Pruned {
    let pruned = case.prune();
    invariants(case, &pruned);
    let report = &pruned.report;
    let mut text = format!(
        "tokens {} -> {}, stubbed {}, reasoning removed {}, protected from {}\n",
        report.tokens_before,
        report.tokens_after,
        report.stubbed_results,
        report.removed_reasoning,
        protected_start(&case.messages, case.format, case.protected_turns)
    );
    for (position, message) in case.messages.iter().enumerate() {
        let replaced = pruned.replacements.iter().find(|r| r.position == position);
        let shown = replaced.map_or(message, |r| &r.message);
        let mark = if replaced.is_some() { '*' } else { ' ' };
        text.push_str(&format!("{mark} {position} {}\n", abbreviated(shown)));
    }
    insta::assert_snapshot!(name, text);
    pruned
}

/// A message as compact JSON with long strings shown by size and opening.
fn abbreviated(message: &Value) -> Value {
    match message {
        Value::String(s) if s.len() > SHOWN_BYTES => {
            Value::String(format!("«{} bytes: {}…»", s.len(), cut_chars(s, 24).0))
        }
        Value::Array(items) => Value::Array(items.iter().map(abbreviated).collect()),
        Value::Object(map) => Value::Object(map.iter().map(|(k, v)| (k.clone(), abbreviated(v))).collect()),
        other => other.clone(),
    }
}

/// A tool output of `lines` numbered lines (about 40 bytes each).
fn output(tag: &str, lines: usize) -> String {
    (1..=lines)
        .map(|i| format!("{tag} line {i}: some output of the tool\n"))
        .collect()
}

fn user(text: &str) -> Value {
    json!({"role": "user", "content": text})
}

fn say(text: &str) -> Value {
    json!({"role": "assistant", "content": text})
}

/// An OpenAI assistant message calling `bash` once per id.
fn calls(ids: &[&str]) -> Value {
    let calls: Vec<Value> = ids
        .iter()
        .map(|id| json!({"id": id, "type": "function", "function": {"name": "bash", "arguments": "{\"command\":\"make\"}"}}))
        .collect();
    json!({"role": "assistant", "content": null, "tool_calls": calls})
}

fn tool(id: &str, content: &str) -> Value {
    json!({"role": "tool", "tool_call_id": id, "content": content})
}

/// An Anthropic assistant message: thinking, then one `tool_use` per id.
fn think_and_call(thought: &str, ids: &[&str]) -> Value {
    let mut blocks = vec![json!({"type": "thinking", "thinking": thought, "signature": "sig"})];
    blocks.extend(
        ids.iter()
            .map(|id| json!({"type": "tool_use", "id": id, "name": "bash", "input": {"command": "make"}})),
    );
    json!({"role": "assistant", "content": blocks})
}

fn results(outputs: &[(&str, &str)]) -> Value {
    let blocks: Vec<Value> = outputs
        .iter()
        .map(|(id, out)| json!({"type": "tool_result", "tool_use_id": id, "content": out}))
        .collect();
    json!({"role": "user", "content": blocks})
}

#[test]
fn old_results_with_a_file_become_stubs_and_others_stay() {
    let case = Case::new(
        MessageFormat::Openai,
        vec![
            json!({"role": "system", "content": "You are a coding agent."}),
            user("Run the build and tell me what fails."),
            calls(&["c1", "c2", "c3"]),
            tool("c1", &output("offloaded", 10)),
            tool("c2", &output("no file", 10)),
            tool("c3", "short"),
            say("The build fails in two places."),
            user("Now fix them."),
            calls(&["c4"]),
            tool("c4", &output("protected", 10)),
            say("Fixed."),
        ],
    )
    .offload(&["c1", "c3", "c4"]);
    let pruned = check(&case, "openai_stubs");
    assert_eq!(pruned.report.stubbed_results, 1);
    let stub = pruned.replacements[0].message["content"].as_str().unwrap();
    assert!(stub.starts_with("offloaded line 1: so\n[content pruned for this request"));
    assert!(stub.ends_with("(421 bytes, 10 lines) is in tool_result/c1.txt; read it with context.read]"));
}

#[test]
fn anthropic_thinking_goes_and_results_become_stubs() {
    let case = Case::new(
        MessageFormat::Anthropic,
        vec![
            user("Find why the login test fails."),
            think_and_call("The test probably times out; run it.", &["t1", "t2"]),
            json!({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "t1", "is_error": true, "content": output("error", 10)},
                {"type": "tool_result", "tool_use_id": "t2", "content": [
                    {"type": "text", "text": output("listing", 10)},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBOR"}}]}]}),
            json!({"role": "assistant", "content": [
                {"type": "redacted_thinking", "data": "opaque"},
                {"type": "thinking", "thinking": "It is the timeout.", "signature": "sig"}]}),
            user("Then raise the timeout."),
            think_and_call("Edit the config.", &["t3"]),
            results(&[("t3", &output("protected", 10))]),
        ],
    )
    .offload(&["t1", "t2", "t3"]);
    let pruned = check(&case, "anthropic_thinking_and_stubs");
    assert_eq!((pruned.report.stubbed_results, pruned.report.removed_reasoning), (2, 3));
    let reply = &pruned.replacements.last().unwrap().message;
    assert_eq!(
        reply["content"],
        json!([{"type": "text", "text": REASONING_PLACEHOLDER}]),
        "a reply of only thinking keeps a placeholder"
    );
}

#[test]
fn openai_reasoning_fields_go_and_no_message_is_left_empty() {
    let reasoning = "Let me think about this step by step before answering the question.";
    let case = Case::new(
        MessageFormat::Openai,
        vec![
            user("Plan the migration."),
            json!({"role": "assistant", "content": "First I read the schema.", "reasoning_content": reasoning,
                "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}]}),
            tool("c1", "schema"),
            json!({"role": "assistant", "content": null, "reasoning": reasoning,
                "reasoning_details": [{"type": "reasoning.text", "text": reasoning}], "thinking": reasoning}),
            json!({"role": "assistant", "content": "", "reasoning_content": reasoning, "name": "planner"}),
            json!({"role": "assistant", "content": null, "reasoning_content": reasoning,
                "tool_calls": [{"id": "c2", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}]}),
            tool("c2", "table"),
            user("Go ahead."),
            json!({"role": "assistant", "content": "On it.", "reasoning_content": reasoning}),
        ],
    );
    let pruned = check(&case, "openai_reasoning");
    assert_eq!(pruned.report.removed_reasoning, 6);
    assert_eq!(pruned.replacements[1].message["content"], REASONING_PLACEHOLDER);
    assert_eq!(pruned.replacements[2].message["name"], "planner", "other fields stay");
    assert_eq!(
        pruned.replacements[3].message["content"],
        Value::Null,
        "a message with calls is not empty"
    );
}

#[test]
fn protected_turns_are_never_touched() {
    let mut messages = Vec::new();
    for turn in 0..4 {
        let id = format!("c{turn}");
        messages.extend([
            user(&format!("Step {turn}, please.")),
            calls(&[&id]),
            tool(&id, &output(&format!("turn {turn}"), 10)),
        ]);
    }
    let case = Case::new(MessageFormat::Openai, messages)
        .offload(&["c0", "c1", "c2", "c3"])
        .protect(3);
    let pruned = check(&case, "protected_turns");
    assert_eq!(protected_start(&case.messages, case.format, 3), 3);
    assert_eq!(pruned.replacements.iter().map(|r| r.position).collect::<Vec<_>>(), [2]);
    assert_eq!(
        protected_start(&case.messages, case.format, 5),
        0,
        "fewer turns: all protected"
    );
}

#[test]
fn the_boundary_moves_back_to_keep_a_call_with_its_result() {
    // The newest turn is the user's words added to the message with the results: protecting
    // it protects the call those results answer, thinking included.
    let case = Case::new(
        MessageFormat::Anthropic,
        vec![
            user("Run the tests."),
            think_and_call("Run them.", &["t1"]),
            results(&[("t1", &output("old", 10))]),
            think_and_call("Run them again.", &["t2"]),
            json!({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "t2", "content": output("newest", 10)},
                {"type": "text", "text": "Also check the docs."}]}),
        ],
    )
    .offload(&["t1", "t2"]);
    assert_eq!(protected_start(&case.messages, case.format, 1), 3);
    let pruned = check(&case, "boundary_pulled_back");
    assert_eq!(
        pruned.replacements.iter().map(|r| r.position).collect::<Vec<_>>(),
        [1, 2]
    );
}

#[test]
fn pruning_stops_at_the_target_oldest_first() {
    let mut messages = vec![user("Collect the logs.")];
    for i in 1..=4 {
        let id = format!("c{i}");
        messages.extend([calls(&[&id]), tool(&id, &output(&format!("log {i}"), 20))]);
    }
    messages.push(user("Summarise them."));
    let case = Case::new(MessageFormat::Openai, messages).offload(&["c1", "c2", "c3", "c4"]);
    let everything = case.prune();
    assert_eq!(everything.report.stubbed_results, 4);
    // A target the first stub reaches: only the oldest result goes.
    let first = &everything.replacements[0];
    let target = case.total() - (case.tokens()[first.position] - first.tokens);
    let case = case.target(target);
    let pruned = check(&case, "progressive");
    assert_eq!(pruned.replacements.iter().map(|r| r.position).collect::<Vec<_>>(), [2]);
    assert!(pruned.report.tokens_after <= case.target.unwrap());
}

#[test]
fn a_request_under_its_target_is_unchanged() {
    let case = Case::new(
        MessageFormat::Openai,
        vec![
            user("Hi."),
            calls(&["c1"]),
            tool("c1", &output("x", 10)),
            user("Thanks."),
        ],
    )
    .offload(&["c1"]);
    let total = case.total();
    let case = case.target(total);
    let pruned = case.prune();
    assert!(pruned.replacements.is_empty());
    assert_eq!(pruned.report.tokens_after, pruned.report.tokens_before);
}

#[test]
fn the_summary_and_the_users_words_are_never_stubbed() {
    let summary = format!("# Summary of previous conversation\n\n{}", output("summary", 20));
    let mut case = Case::new(
        MessageFormat::Openai,
        vec![
            user(&summary),
            user(&output("pasted log", 20)),
            calls(&["c1"]),
            tool("c1", &output("result", 10)),
            user("Next."),
        ],
    )
    .offload(&["c1"]);
    // Pointers that are not tool-result texts, as a confused caller might pass them.
    for position in [0, 1] {
        case.offloaded
            .push((position, "/content".into(), "tool_result/bogus.txt".into()));
    }
    let pruned = check(&case, "summary_untouched");
    assert_eq!(pruned.replacements.iter().map(|r| r.position).collect::<Vec<_>>(), [3]);
}

#[test]
fn stubs_cut_on_char_boundaries_and_only_when_smaller() {
    let case = Case::new(
        MessageFormat::Openai,
        vec![
            user("Translate."),
            calls(&["c1", "c2"]),
            tool("c1", &"日本語のテキスト。".repeat(30)),
            // Longer than twice the stub, but shorter than a stub with its notice.
            tool("c2", &"x".repeat(60)),
            user("Done?"),
        ],
    )
    .offload(&["c1", "c2"]);
    let pruned = check(&case, "char_boundaries");
    assert_eq!(pruned.report.stubbed_results, 1);
    let stub = pruned.replacements[0].message["content"].as_str().unwrap();
    assert!(stub.starts_with("日本語のテキスト。日本語のテキスト。日本\n"));
}
