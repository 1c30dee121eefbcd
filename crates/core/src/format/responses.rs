//! The OpenAI Responses format: a conversation is a list of input *items*, not of messages.
//!
//! A `message` item carries a role and text parts (`input_text`, `output_text`) or a plain
//! string; a tool call is an item of its own (`function_call`, `custom_tool_call`) answered by
//! an output item (`function_call_output`, `custom_tool_call_output`) naming the same `call_id`;
//! `reasoning` items (with `encrypted_content` the provider signed) sit before what they
//! explain. Items of other types (web search calls, compaction items, types invented next year)
//! are kept as they are and count as the assistant's side of the turn.
//!
//! The rest of satchel reads an item through the same questions it asks a chat message (its
//! role, the calls it makes, the results it carries), so an item without a `role` is given the
//! role of the side it stands on: [`item_role`].

use serde_json::Value;

use super::{ResultText, ToolCall, push_texts};

/// Item types that make a tool call, each with the type of the item that answers it.
const CALLS: [(&str, &str); 2] = [
    ("function_call", "function_call_output"),
    ("custom_tool_call", "custom_tool_call_output"),
];

/// Item types that only this format has: one of them in a list tells the format apart. Not
/// `message`: an Anthropic response object sent back as a message has `"type": "message"` too.
pub(super) const DISTINCT_ITEM_TYPES: [&str; 5] = [
    "function_call",
    "function_call_output",
    "custom_tool_call",
    "custom_tool_call_output",
    "reasoning",
];

/// Text part types of this format's messages and tool outputs.
pub(super) const TEXT_PARTS: [&str; 2] = ["input_text", "output_text"];

/// Content part types that only this format has.
pub(super) const DISTINCT_PARTS: [&str; 4] = ["input_text", "output_text", "input_image", "input_file"];

fn item_type(item: &Value) -> Option<&str> {
    item.get("type").and_then(Value::as_str)
}

/// The role of an item without one: `tool` for a tool output, `assistant` for every other
/// item (calls, reasoning, unknown types), which only the model produces.
pub(super) fn item_role(item: &Value) -> &'static str {
    if is_output(item) { "tool" } else { "assistant" }
}

/// True for an output item that answers a call.
pub(super) fn is_output(item: &Value) -> bool {
    item_type(item).is_some_and(|t| CALLS.iter().any(|(_, output)| *output == t))
}

/// The type of the output item that answers a call item, or `None` when `item` makes no call.
pub(crate) fn output_type(item: &Value) -> Option<&'static str> {
    let t = item_type(item)?;
    CALLS.iter().find(|(call, _)| *call == t).map(|(_, output)| *output)
}

/// The call an item makes: `call_id`, `name`, and `arguments` (function) or `input` (custom)
/// as the text the model wrote.
pub(super) fn call(item: &Value) -> Option<ToolCall> {
    output_type(item)?;
    let id = item.get("call_id")?.as_str()?.to_owned();
    let name = item.get("name").and_then(Value::as_str).unwrap_or("").to_owned();
    let arguments = match item.get("arguments").or_else(|| item.get("input")) {
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => String::new(),
    };
    Some(ToolCall { id, name, arguments })
}

/// The `call_id` an item's call or output names.
pub(super) fn call_id(item: &Value) -> Option<&str> {
    item.get("call_id").and_then(Value::as_str)
}

/// The texts of an output item: its `output` string, or the text parts of an `output` list
/// (images and files are left alone).
pub(super) fn result_texts(item: &Value) -> Vec<ResultText> {
    let mut out = Vec::new();
    if is_output(item) {
        let id = call_id(item).map(str::to_owned);
        push_texts(item.get("output"), "/output", &TEXT_PARTS, &id, &mut out);
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use crate::format::{self, MessageFormat, check_pairs, detect};

    const FORMAT: MessageFormat = MessageFormat::OpenaiResponses;

    /// What satchel reads of each item: its role, the calls it makes, the results it carries
    /// and the texts it may cut (pointer = text), then the detected format and the pair check.
    fn check(name: &str, items: &[Value]) {
        let mut text = format!("detected {:?}\npairs {:?}\n", detect(items), check_pairs(items, FORMAT));
        for (i, item) in items.iter().enumerate() {
            let role = format::role_of(item).unwrap_or("?");
            text.push_str(&format!("{i} {role}"));
            for call in format::tool_calls(item, FORMAT) {
                text.push_str(&format!(" call {} {}({})", call.id, call.name, call.arguments));
            }
            for id in format::result_ids(item, FORMAT) {
                text.push_str(&format!(" answers {id}"));
            }
            for t in format::result_texts(item, FORMAT) {
                let shown = item.pointer(&t.pointer).and_then(Value::as_str).unwrap_or("?");
                text.push_str(&format!(" | {} = {shown:?}", t.pointer));
            }
            text.push('\n');
        }
        insta::assert_snapshot!(name, text);
    }

    fn developer(text: &str) -> Value {
        json!({"type": "message", "id": "msg_d", "role": "developer", "content": [{"type": "input_text", "text": text}]})
    }

    fn user(text: &str) -> Value {
        json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]})
    }

    fn exec(call_id: &str, cmd: &str) -> Value {
        json!({"type": "function_call", "status": "completed", "id": "fc_1", "name": "exec_command",
               "arguments": json!({"cmd": cmd}).to_string(), "call_id": call_id})
    }

    fn output(call_id: &str, text: &str) -> Value {
        json!({"type": "function_call_output", "id": "fco_1", "call_id": call_id, "output": text})
    }

    #[test]
    fn a_codex_turn_is_read_item_by_item() {
        check(
            "responses_codex_turn",
            &[
                developer("You are a coding agent."),
                user("<environment_context><cwd>/w</cwd></environment_context>"),
                user("list the files, then patch the readme"),
                json!({"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "look first"}],
                       "encrypted_content": "gAAAAB…"}),
                exec("call_1", "ls"),
                json!({"type": "custom_tool_call", "call_id": "call_2", "name": "apply_patch", "input": "*** Begin Patch\n*** End Patch"}),
                output("call_1", "Process exited with code 0\nOutput:\nREADME.md\nsrc\n"),
                json!({"type": "custom_tool_call_output", "call_id": "call_2", "output": [
                    {"type": "input_text", "text": "Done!"},
                    {"type": "input_image", "image_url": "data:image/png;base64,AAAA"},
                    {"type": "input_text", "text": "1 file changed"}]}),
                json!({"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"type": "search"}}),
                json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Done.", "annotations": []}]}),
            ],
        );
    }

    #[test]
    fn agents_sdk_items_without_a_message_type_are_read() {
        // The Agents SDK sends user input as `{"content", "role"}` and no `type`.
        check(
            "responses_agents_sdk",
            &[
                json!({"content": "list the files", "role": "user"}),
                json!({"arguments": "{\"command\": \"ls\"}", "call_id": "call_a", "name": "shell", "type": "function_call"}),
                json!({"call_id": "call_a", "output": "a.txt\nb.py\n", "type": "function_call_output"}),
            ],
        );
    }

    #[test]
    fn pairs_are_checked_step_by_step() {
        let cases: Vec<(&str, Vec<Value>)> = vec![
            (
                "parallel calls, then their outputs",
                vec![
                    user("go"),
                    exec("a", "ls"),
                    exec("b", "pwd"),
                    output("b", "/"),
                    output("a", "x"),
                ],
            ),
            (
                "outputs interleaved with the calls",
                vec![
                    user("go"),
                    exec("a", "ls"),
                    output("a", "x"),
                    exec("b", "pwd"),
                    output("b", "/"),
                ],
            ),
            (
                "a call pending at the end",
                vec![user("go"), exec("a", "ls"), output("a", "x"), exec("b", "pwd")],
            ),
            (
                "an output before its call",
                vec![user("go"), output("a", "x"), exec("a", "ls")],
            ),
            (
                "a user message while a call is open",
                vec![user("go"), exec("a", "ls"), user("stop")],
            ),
            (
                "a new step while a call is open",
                vec![
                    user("go"),
                    exec("a", "ls"),
                    exec("b", "pwd"),
                    output("a", "x"),
                    exec("c", "make"),
                ],
            ),
            (
                "an output answering twice",
                vec![user("go"), exec("a", "ls"), output("a", "x"), output("a", "x")],
            ),
        ];
        let got: Vec<String> = cases
            .iter()
            .map(|(name, items)| format!("{name}: {:?}", check_pairs(items, FORMAT)))
            .collect();
        insta::assert_snapshot!("responses_pairs", got.join("\n"));
    }

    #[test]
    fn the_format_is_told_apart_only_by_what_only_it_has() {
        let got = [
            vec![json!({"role": "user", "content": "hi"})],
            vec![json!({"role": "user", "content": [{"type": "input_text", "text": "hi"}]})],
            vec![
                json!({"role": "user", "content": "hi"}),
                json!({"type": "reasoning", "encrypted_content": "e"}),
            ],
            vec![json!({"role": "user", "content": [{"type": "text", "text": "hi"}]})],
            vec![json!({"role": "tool", "tool_call_id": "c", "content": "x"})],
            // An Anthropic response object sent back as it came.
            vec![json!({"id": "msg_1", "type": "message", "role": "assistant", "content": [{"type": "text", "text": "hi"}]})],
        ]
        .iter()
        .map(|items| detect(items))
        .collect::<Vec<_>>();
        assert_eq!(
            got,
            [
                None,
                Some(FORMAT),
                Some(FORMAT),
                None,
                Some(MessageFormat::Openai),
                None
            ]
        );
    }
}
