//! The messages the tests send: plain turns, tool calls and their results in each format,
//! build outputs, and the steps of the coding agent loop that `compaction` and `llm` drive
//! (tuned by each through an [`AgentLoop`]).

use serde_json::{Value, json};

use super::trajectories::Format;

/// The agent loop's system prompt.
pub const SYSTEM: &str = "You are a careful coding agent working in a Rust repository.";
/// The command of the agent loop's very first tool call, a fact the summary must keep across
/// compactions.
pub const FIRST_COMMAND: &str = "cargo build -p parser --features legacy-lexer";
/// The file the error of the first tool call's output names.
pub const FIRST_FILE: &str = "crates/parser/src/lexer_v1.rs";

pub fn system(text: &str) -> Value {
    json!({"role": "system", "content": text})
}

/// A Responses `developer` message item, as Codex sends its instructions.
pub fn developer(text: &str) -> Value {
    json!({"type": "message", "role": "developer", "content": [{"type": "input_text", "text": text}]})
}

pub fn user(text: &str) -> Value {
    json!({"role": "user", "content": text})
}

pub fn assistant(text: &str) -> Value {
    json!({"role": "assistant", "content": text})
}

/// An OpenAI assistant turn without text calling `(id, tool name, arguments)` tools.
pub fn openai_calls(calls: &[(&str, &str, Value)]) -> Value {
    let calls: Vec<Value> = calls
        .iter()
        .map(|(id, name, args)| {
            json!({"id": id, "type": "function", "function": {"name": name, "arguments": args.to_string()}})
        })
        .collect();
    json!({"role": "assistant", "content": null, "tool_calls": calls})
}

/// An OpenAI `tool` message answering call `id`.
pub fn tool_result(id: &str, content: &str) -> Value {
    json!({"role": "tool", "tool_call_id": id, "content": content})
}

/// An assistant turn saying `say` and calling tool `name` with `args` under call `id`; in the
/// Responses format the call item alone (its text is an item of its own: [`agent_step`]).
pub fn call_message(format: Format, id: &str, name: &str, args: &Value, say: &str) -> Value {
    match format {
        Format::Openai => json!({
            "role": "assistant",
            "content": say,
            "tool_calls": [{"id": id, "type": "function", "function": {"name": name, "arguments": args.to_string()}}],
        }),
        Format::Anthropic => json!({
            "role": "assistant",
            "content": [{"type": "text", "text": say}, {"type": "tool_use", "id": id, "name": name, "input": args}],
        }),
        Format::OpenaiResponses => json!({
            "type": "function_call", "id": format!("fc_{id}"), "status": "completed",
            "name": name, "arguments": args.to_string(), "call_id": id,
        }),
    }
}

/// The result of call `id`: an OpenAI `tool` message, an Anthropic user message holding a
/// `tool_result` block, or a Responses `function_call_output` item.
pub fn result_message(format: Format, id: &str, output: &str) -> Value {
    match format {
        Format::Openai => tool_result(id, output),
        Format::Anthropic => json!({
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": id, "content": output}],
        }),
        Format::OpenaiResponses => json!({"type": "function_call_output", "call_id": id, "output": output}),
    }
}

/// The id of the tool call of agent step `step`, in the style of `format`.
pub fn call_id(format: Format, step: usize) -> String {
    match format {
        Format::Openai | Format::OpenaiResponses => format!("call_{step}"),
        Format::Anthropic => format!("toolu_{step:02}"),
    }
}

/// A build log of about `bytes` bytes (agent step `step`) ending with an error that names
/// `file`.
pub fn tool_output(step: usize, bytes: usize, file: &str) -> String {
    let mut out = String::with_capacity(bytes + 200);
    let mut i = 0;
    while out.len() < bytes {
        i += 1;
        out.push_str(&format!(
            "[step {step}] {i:04} checking crates/parser/src/module_{}.rs ... ok, {} warnings\n",
            (step * 31 + i) % 97,
            i % 5
        ));
    }
    out.push_str(&format!(
        "error[E0308]: mismatched types\n  --> {file}:{}:13\n",
        40 + step
    ));
    out
}

/// How a test tunes the agent loop of [`agent_step`] to its window and offload threshold.
pub struct AgentLoop {
    /// Bytes of the output of the first build and of each `cargo check`.
    pub check_bytes: usize,
    /// Bytes of the output of each `cargo test`.
    pub test_bytes: usize,
    /// Whether step `s` (after the first) runs `cargo test`; of the others, every third from
    /// step 1 edits a file and the rest run `cargo check`.
    pub runs_tests: fn(usize) -> bool,
    /// The assistant's reply to the user that ends step `s` (every fifth step).
    pub reply: fn(usize) -> String,
}

/// The messages of step `s` of a coding agent fixing the parser crate: every fifth step a
/// reply and a new user request; otherwise a tool call and its result: the first build (running
/// [`FIRST_COMMAND`]), then `cargo test` runs, edits and `cargo check` runs as `tuning` says,
/// with outputs of its sizes.
pub fn agent_step(format: Format, tuning: &AgentLoop, s: usize) -> Vec<Value> {
    if s % 5 == 4 {
        let request = format!(
            "Thanks. Now check module {} as well, and make sure clippy stays clean.",
            s + 1
        );
        return vec![assistant(&(tuning.reply)(s)), user(&request)];
    }
    let module = format!("crates/parser/src/module_{s}.rs");
    let (name, args, output) = match s {
        0 => (
            "bash",
            json!({"command": FIRST_COMMAND}),
            tool_output(0, tuning.check_bytes, FIRST_FILE),
        ),
        s if (tuning.runs_tests)(s) => (
            "bash",
            json!({"command": format!("cargo test -p parser module_{s} -- --nocapture")}),
            tool_output(s, tuning.test_bytes, &module),
        ),
        s if s % 3 == 1 => (
            "edit_file",
            json!({"path": module, "patch": format!("-    let x = {s};\n+    let x: u32 = {s};")}),
            format!("Applied the patch to {module}: 2 lines changed.\n"),
        ),
        _ => (
            "bash",
            json!({"command": format!("cargo check -p parser --lib module_{s}")}),
            tool_output(s, tuning.check_bytes, &module),
        ),
    };
    let id = call_id(format, s);
    let say = format!("I'll run `{name}` on module {s} next.");
    if format == Format::OpenaiResponses {
        // Codex's shape: signed reasoning, the text and the call as items of their own.
        return vec![
            json!({"type": "reasoning", "id": format!("rs_{s}"), "summary": [],
                   "encrypted_content": format!("gAAAAB-step-{s}-opaque")}),
            json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": say}]}),
            call_message(format, &id, name, &args, &say),
            result_message(format, &id, &output),
        ];
    }
    vec![
        call_message(format, &id, name, &args, &say),
        result_message(format, &id, &output),
    ]
}
