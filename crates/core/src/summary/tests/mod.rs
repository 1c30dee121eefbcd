//! Rule-by-rule tests of the summary: one `check(case, snapshot)` helper renders the summary
//! of a conversation and compares it with its snapshot in `snapshots/` (insta; run with
//! `INSTA_UPDATE=always` to write new ones, then read the diff), plus plain asserts for what
//! each rule guarantees.

mod lessons;
mod probe;
mod props;
mod retention;
mod rules;

use satchel_protocol::config::Tokenizer;
use satchel_protocol::{ArchiveRange, CompactSummary, MessageFormat};
use serde_json::{Value, json};

use super::extractive::ExtractiveSummarizer;
use super::render::{render_summary, summary_message_text};
use super::{Summarizer, SummaryInput};
use crate::render::summary_message_tokens;
use crate::tokens::TokenCounter;

fn counter() -> TokenCounter {
    TokenCounter::new(Tokenizer::O200kBase, 4.0)
}

/// A compaction to summarise.
#[derive(Clone)]
struct Case<'a> {
    messages: Vec<Value>,
    format: MessageFormat,
    previous: Option<&'a CompactSummary>,
    instruction: Option<&'a str>,
    max_tokens: u64,
    /// Original index of the first message (requests name their index).
    first_index: usize,
}

impl<'a> Case<'a> {
    fn new(messages: Vec<Value>) -> Case<'a> {
        Case {
            messages,
            format: MessageFormat::Openai,
            previous: None,
            instruction: None,
            max_tokens: 2500,
            first_index: 0,
        }
    }

    fn anthropic(mut self) -> Self {
        self.format = MessageFormat::Anthropic;
        self
    }

    fn responses(mut self) -> Self {
        self.format = MessageFormat::OpenaiResponses;
        self
    }

    fn after(mut self, previous: &'a CompactSummary) -> Self {
        self.previous = Some(previous);
        self.first_index = previous.archive.last().map_or(0, |r| r.first_index + r.messages);
        self
    }

    fn instruction(mut self, instruction: &'a str) -> Self {
        self.instruction = Some(instruction);
        self
    }

    fn budget(mut self, max_tokens: u64) -> Self {
        self.max_tokens = max_tokens;
        self
    }

    /// The summary, with the archive range the daemon would append (`dialog/2026-11-24.jsonl`,
    /// one line per message, numbered like the indices).
    fn summarize(&self) -> CompactSummary {
        let counter = counter();
        let indices: Vec<usize> = (self.first_index..self.first_index + self.messages.len()).collect();
        let mut summary = ExtractiveSummarizer
            .summarize(&SummaryInput {
                previous: self.previous,
                indices: &indices,
                instruction: self.instruction,
                ..SummaryInput::new(&self.messages, self.format, self.max_tokens, &counter)
            })
            .expect("the extractive summariser never fails");
        let range = ArchiveRange {
            file: "dialog/2026-11-24.jsonl".into(),
            start_line: self.first_index + 1,
            end_line: self.first_index + self.messages.len(),
            first_index: self.first_index,
            last_index: self.first_index + self.messages.len().saturating_sub(1),
            messages: self.messages.len(),
        };
        if !self.messages.is_empty() {
            summary.add_archive_range(range, &indices);
        }
        let tokens = summary_message_tokens(&summary_message_text(&summary), self.format, &counter);
        assert!(
            tokens <= self.max_tokens,
            "{tokens} tokens over the budget of {}:\n{}",
            self.max_tokens,
            summary_message_text(&summary)
        );
        summary
    }
}

/// Summarises `case` and compares its rendering with the snapshot `name`.
fn check(case: Case<'_>, name: &str) -> CompactSummary {
    let summary = case.summarize();
    insta::assert_snapshot!(name, render_summary(&summary));
    summary
}

fn user(text: &str) -> Value {
    json!({"role": "user", "content": text})
}

fn say(text: &str) -> Value {
    json!({"role": "assistant", "content": text})
}

/// An assistant message with one shell call `id`.
fn run(id: &str, text: &str, command: &str) -> Value {
    call(id, text, "bash", json!({"command": command}))
}

fn call(id: &str, text: &str, tool: &str, args: Value) -> Value {
    json!({"role": "assistant", "content": text, "tool_calls": [{"id": id, "type": "function",
        "function": {"name": tool, "arguments": args.to_string()}}]})
}

fn result(id: &str, output: &str) -> Value {
    json!({"role": "tool", "tool_call_id": id, "content": output})
}

const REQUEST: &str = "Please fix the failing build in crates/app/src/main.rs. You must not change the public API. \
                       Keep the changes minimal and never touch vendor/.";
const BUILD: &str = "cargo build --release 2>&1 | tail -n 20";
const BUILD_ERROR: &str = "error[E0433]: failed to resolve: use of undeclared crate or module `serde`";

/// A small coding session: read, edit, a failing build, a stated plan.
fn session() -> Vec<Value> {
    vec![
        user(REQUEST),
        run("c1", "Let's look at the file first.", "cat crates/app/src/main.rs"),
        result("c1", "use serde::Serialize;\nfn main() {}"),
        call(
            "c2",
            "The issue is a missing dependency. I'll add it to Cargo.toml instead of vendoring.",
            "str_replace_based_edit_tool",
            json!({"command": "str_replace", "path": "crates/app/Cargo.toml", "old_str": "[dependencies]", "new_str": "[dependencies]\nserde = \"1\""}),
        ),
        result("c2", "The file crates/app/Cargo.toml has been edited."),
        run("c3", "", BUILD),
        result(
            "c3",
            &format!("   Compiling app v0.1.0\n{BUILD_ERROR}\n  --> src/main.rs:1:5"),
        ),
        say("Next I'll check the workspace manifest:\n1. Open Cargo.toml at the root\n2. Rerun the build"),
    ]
}

/// The same session as Anthropic messages.
fn anthropic_session() -> Vec<Value> {
    vec![
        json!({"role": "user", "content": [{"type": "text", "text": REQUEST}]}),
        json!({"role": "assistant", "content": [
            {"type": "text", "text": "Let's look at the file first."},
            {"type": "tool_use", "id": "t1", "name": "bash", "input": {"command": "cat crates/app/src/main.rs"}}]}),
        json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "use serde::Serialize;\nfn main() {}"}]}),
        json!({"role": "assistant", "content": [
            {"type": "text", "text": "The issue is a missing dependency. I'll add it to Cargo.toml instead of vendoring."},
            {"type": "tool_use", "id": "t2", "name": "write_file", "input": {"path": "crates/app/Cargo.toml", "content": "[dependencies]\nserde = \"1\""}},
            {"type": "tool_use", "id": "t3", "name": "bash", "input": {"command": BUILD}}]}),
        json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t2", "content": [{"type": "text", "text": "ok"}]},
            {"type": "tool_result", "tool_use_id": "t3", "is_error": true,
             "content": [{"type": "text", "text": format!("   Compiling app v0.1.0\n{BUILD_ERROR}\n  --> src/main.rs:1:5")}]},
            {"type": "text", "text": "Also, always run clippy before you finish."}]}),
        json!({"role": "assistant", "content": [
            {"type": "text", "text": "Next I'll check the workspace manifest:\n1. Open Cargo.toml at the root\n2. Rerun the build"}]}),
    ]
}

/// The same session as Responses items, as Codex sends them: the instructions as a developer
/// message, reasoning items, the text and each call as items of their own.
fn responses_session() -> Vec<Value> {
    let text = |role: &str, kind: &str, text: &str| json!({"type": "message", "role": role, "content": [{"type": kind, "text": text}]});
    let call = |id: &str, name: &str, args: Value| json!({"type": "function_call", "call_id": id, "name": name, "arguments": args.to_string(), "status": "completed"});
    let output = |id: &str, out: &str| json!({"type": "function_call_output", "call_id": id, "output": out});
    let reasoning = json!({"type": "reasoning", "summary": [], "encrypted_content": "gAAAAB-signed"});
    vec![
        text(
            "developer",
            "input_text",
            "You are a coding agent running in a terminal.",
        ),
        text("user", "input_text", REQUEST),
        reasoning.clone(),
        text("assistant", "output_text", "Let's look at the file first."),
        call("c1", "exec_command", json!({"cmd": "cat crates/app/src/main.rs"})),
        output("c1", "use serde::Serialize;\nfn main() {}"),
        reasoning.clone(),
        text(
            "assistant",
            "output_text",
            "The issue is a missing dependency. I'll add it to Cargo.toml instead of vendoring.",
        ),
        call(
            "c2",
            "str_replace_based_edit_tool",
            json!({"command": "str_replace", "path": "crates/app/Cargo.toml", "old_str": "[dependencies]", "new_str": "[dependencies]\nserde = \"1\""}),
        ),
        output("c2", "The file crates/app/Cargo.toml has been edited."),
        call("c3", "exec_command", json!({"cmd": BUILD})),
        output(
            "c3",
            &format!(
                "Process exited with code 101\nOutput:\n   Compiling app v0.1.0\n{BUILD_ERROR}\n  --> src/main.rs:1:5"
            ),
        ),
        text("user", "input_text", "Also, always run clippy before you finish."),
        reasoning,
        text(
            "assistant",
            "output_text",
            "Next I'll check the workspace manifest:\n1. Open Cargo.toml at the root\n2. Rerun the build",
        ),
    ]
}

/// A long session: every call distinct, every fifth result failing.
fn huge_session(messages: usize) -> Vec<Value> {
    let mut out = vec![user(
        "Migrate every module to the new logging API. Do not change behaviour.",
    )];
    for i in 0..messages / 2 {
        let command =
            format!("sed -i 's/log::info/tracing::info/' crates/mod_{i}/src/lib_{i}.rs && cargo check -p mod_{i}");
        out.push(run(
            &format!("c{i}"),
            &format!("Let's migrate module {i} because it still uses log."),
            &command,
        ));
        let content = if i % 5 == 0 {
            format!("error[E0432]: unresolved import `tracing` in mod_{i}")
        } else {
            "Finished dev".to_owned()
        };
        out.push(result(&format!("c{i}"), &content));
    }
    out
}

/// The shared data (`../shared/data`, or `SATCHEL_SHARED_DATA`), which the repository does not
/// hold: the checks on real trajectories say they skip without it.
fn shared_data() -> std::path::PathBuf {
    match std::env::var_os("SATCHEL_SHARED_DATA") {
        Some(dir) if !dir.is_empty() => std::path::PathBuf::from(dir),
        _ => std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data"),
    }
}

/// Hand-checked outcome labels of the shared trajectories' results, per run, by call id.
type Labels = std::collections::HashMap<String, std::collections::HashMap<String, String>>;

fn outcome_labels() -> Labels {
    let mut all: std::collections::HashMap<String, Value> = serde_json::from_str(include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/testdata/outcome_labels.json"
    )))
    .expect("labels parse");
    all.remove("_doc");
    all.into_iter()
        .map(|(run, v)| (run, serde_json::from_value(v).expect("labels are strings")))
        .collect()
}
