//! Knowledge of the message formats satchel speaks (OpenAI Chat, Anthropic, OpenAI Responses):
//! where tool calls and tool results live.
//!
//! Messages stay `serde_json::Value`s end to end so that every field satchel does not manage
//! (`cache_control`, `name`, reasoning fields, keys invented next year) survives untouched.
//! This module only *locates* things inside them; it never rebuilds a message. A Responses
//! input item is a "message" here too: [`role_of`] gives an item without a role the role of the
//! side it stands on, so every later step reads all three formats through the same questions.

mod native;
mod responses;

use serde_json::Value;

pub use native::{is_native_compaction, last_native_compaction};
pub(crate) use responses::output_type;

pub use satchel_protocol::MessageFormat;

/// A tool call as the assistant made it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCall {
    /// The id a result answers (`tool_calls[].id` / `tool_use.id` / `call_id`).
    pub id: String,
    /// Tool name.
    pub name: String,
    /// Arguments as JSON text (OpenAI sends a string; Anthropic's `input` object is serialised;
    /// a Responses custom tool's `input` is its free text).
    pub arguments: String,
}

/// A text inside a tool result that satchel may truncate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResultText {
    /// JSON pointer of the string inside the message (for `Value::pointer_mut`).
    pub pointer: String,
    /// The id of the call this result answers, when the message says.
    pub call_id: Option<String>,
}

/// Detects the format from message shapes; `None` when nothing distinguishes them
/// (plain text turns with string content look the same in all three).
pub fn detect(messages: &[Value]) -> Option<MessageFormat> {
    messages.iter().find_map(detect_one)
}

fn detect_one(message: &Value) -> Option<MessageFormat> {
    // Only Responses has call, output and reasoning items, and parts typed `input_text`,
    // `output_text`, `input_image` or `input_file`.
    if message
        .get("type")
        .and_then(Value::as_str)
        .is_some_and(|t| responses::DISTINCT_ITEM_TYPES.contains(&t))
        || content_blocks(message).any(|b| {
            b.get("type")
                .and_then(Value::as_str)
                .is_some_and(|t| responses::DISTINCT_PARTS.contains(&t))
        })
    {
        return Some(MessageFormat::OpenaiResponses);
    }
    if message.get("role").and_then(Value::as_str) == Some("tool")
        || message.get("tool_calls").is_some()
        || message.get("tool_call_id").is_some()
    {
        return Some(MessageFormat::Openai);
    }
    let blocks = message.get("content")?.as_array()?;
    blocks.iter().find_map(|b| match b.get("type").and_then(Value::as_str) {
        Some("tool_use" | "tool_result" | "thinking" | "redacted_thinking") => Some(MessageFormat::Anthropic),
        Some("image_url" | "input_audio") => Some(MessageFormat::Openai),
        _ => None,
    })
}

/// The role a message plays: its `role`, or for a Responses item without one (a call, an
/// output, reasoning) `tool` for an output and `assistant` for the rest.
pub fn role_of(message: &Value) -> Option<&str> {
    match message.get("role") {
        Some(role) => role.as_str(),
        None if message.get("type").is_some_and(Value::is_string) => Some(responses::item_role(message)),
        None => None,
    }
}

fn role(message: &Value) -> Option<&str> {
    role_of(message)
}

/// True for a content part that holds text: `text` (Chat, Anthropic) or the Responses
/// `input_text` / `output_text`.
pub fn is_text_part(part: &Value) -> bool {
    part.get("type")
        .and_then(Value::as_str)
        .is_some_and(|t| t == "text" || responses::TEXT_PARTS.contains(&t))
}

/// A message of the leading instructions, pinned before everything else: a `system` message,
/// or in the Responses format also a `developer` one (Codex sends its system prompt that way).
pub fn is_instructions(message: &Value, format: MessageFormat) -> bool {
    match role_of(message) {
        Some("system") => true,
        Some("developer") => format == MessageFormat::OpenaiResponses,
        _ => false,
    }
}

/// The roles a message may have: OpenAI's (`system`, `developer`, `user`, `assistant`,
/// `tool`, the legacy `function`) and Anthropic's (`user`, `assistant`).
pub const ROLES: [&str; 6] = ["system", "developer", "user", "assistant", "tool", "function"];

/// Why `message` has no role satchel can place, or `None` when its `role` is one of [`ROLES`]
/// or it is a Responses item without a role (it has a `type`, which places it: [`role_of`]).
/// Every step after ingestion (pairs, turns, compaction, repair) reads the role.
pub fn role_problem(message: &Value) -> Option<String> {
    match message.get("role") {
        // A Responses `message` item says who wrote it by its role, like a chat message.
        None if message.get("type").and_then(Value::as_str) == Some("message") => {
            Some("a `message` item needs a `role`".to_owned())
        }
        None if message.get("type").is_some_and(Value::is_string) => None,
        None => Some("a message needs a `role` (or, as a Responses item, a `type`)".to_owned()),
        Some(Value::String(role)) if ROLES.contains(&role.as_str()) => None,
        Some(Value::String(role)) => Some(format!("unknown role {role:?}: expected one of {}", ROLES.join(", "))),
        Some(_) => Some("`role` must be a string".to_owned()),
    }
}

/// The JSON objects of the tool calls an assistant message makes: OpenAI `tool_calls`
/// entries or Anthropic `tool_use` blocks. Responses calls are items of their own.
fn call_objects(message: &Value, format: MessageFormat) -> Box<dyn Iterator<Item = &Value> + '_> {
    if role(message) != Some("assistant") {
        return Box::new(std::iter::empty());
    }
    match format {
        MessageFormat::OpenaiResponses => Box::new(std::iter::empty()),
        MessageFormat::Openai => Box::new(
            message
                .get("tool_calls")
                .and_then(Value::as_array)
                .into_iter()
                .flatten(),
        ),
        MessageFormat::Anthropic => {
            Box::new(content_blocks(message).filter(|b| b.get("type").and_then(Value::as_str) == Some("tool_use")))
        }
    }
}

/// Tool calls made by an assistant message (a Responses call item makes one).
pub fn tool_calls(message: &Value, format: MessageFormat) -> Vec<ToolCall> {
    if format == MessageFormat::OpenaiResponses {
        return responses::call(message).into_iter().collect();
    }
    call_objects(message, format)
        .filter_map(|call| {
            let id = call.get("id")?.as_str()?.to_owned();
            let (name, arguments) = match format {
                MessageFormat::Openai => {
                    let function = call.get("function");
                    let arguments = match function.and_then(|f| f.get("arguments")) {
                        Some(Value::String(s)) => s.clone(),
                        Some(other) => other.to_string(),
                        None => String::new(),
                    };
                    (function.and_then(|f| f.get("name")), arguments)
                }
                MessageFormat::Anthropic => (
                    call.get("name"),
                    call.get("input").map(Value::to_string).unwrap_or_default(),
                ),
                MessageFormat::OpenaiResponses => unreachable!("Responses calls are read above"),
            };
            let name = name.and_then(Value::as_str).unwrap_or("").to_owned();
            Some(ToolCall { id, name, arguments })
        })
        .collect()
}

/// Ids of the tool calls an assistant message makes, borrowed: the repair pass needs only
/// these, on every call, for every message, so it must not copy arguments.
pub fn tool_call_ids(message: &Value, format: MessageFormat) -> Vec<&str> {
    if format == MessageFormat::OpenaiResponses {
        return output_type(message)
            .and(responses::call_id(message))
            .into_iter()
            .collect();
    }
    call_objects(message, format)
        .filter_map(|call| call.get("id")?.as_str())
        .collect()
}

fn content_blocks(message: &Value) -> impl Iterator<Item = &Value> {
    message.get("content").and_then(Value::as_array).into_iter().flatten()
}

/// Ids of the tool results a message carries, in order.
pub fn result_ids(message: &Value, format: MessageFormat) -> Vec<String> {
    match format {
        MessageFormat::Openai if role(message) == Some("tool") => {
            vec![
                message
                    .get("tool_call_id")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned(),
            ]
        }
        MessageFormat::Openai => Vec::new(),
        MessageFormat::Anthropic => content_blocks(message)
            .filter(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"))
            .map(|b| b.get("tool_use_id").and_then(Value::as_str).unwrap_or("").to_owned())
            .collect(),
        MessageFormat::OpenaiResponses if responses::is_output(message) => {
            vec![responses::call_id(message).unwrap_or("").to_owned()]
        }
        MessageFormat::OpenaiResponses => Vec::new(),
    }
}

/// True when the message carries at least one tool result.
pub fn has_tool_result(message: &Value, format: MessageFormat) -> bool {
    match format {
        MessageFormat::Openai => role(message) == Some("tool"),
        MessageFormat::Anthropic => {
            content_blocks(message).any(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"))
        }
        MessageFormat::OpenaiResponses => responses::is_output(message),
    }
}

/// The texts inside a message's tool results, each addressed by a JSON pointer.
///
/// A string result is one text; a list result yields each text part and leaves images
/// and other blocks alone.
pub fn result_texts(message: &Value, format: MessageFormat) -> Vec<ResultText> {
    let mut out = Vec::new();
    match format {
        MessageFormat::Openai => {
            if role(message) == Some("tool") {
                let call_id = message.get("tool_call_id").and_then(Value::as_str).map(str::to_owned);
                push_texts(message.get("content"), "/content", &["text"], &call_id, &mut out);
            }
        }
        MessageFormat::OpenaiResponses => out = responses::result_texts(message),
        MessageFormat::Anthropic => {
            for (i, block) in content_blocks(message).enumerate() {
                if block.get("type").and_then(Value::as_str) == Some("tool_result") {
                    let call_id = block.get("tool_use_id").and_then(Value::as_str).map(str::to_owned);
                    push_texts(
                        block.get("content"),
                        &format!("/content/{i}/content"),
                        &["text"],
                        &call_id,
                        &mut out,
                    );
                }
            }
        }
    }
    out
}

/// Pushes the text of `content`: the string itself, or each part of a type in `part_types`.
fn push_texts(
    content: Option<&Value>,
    base: &str,
    part_types: &[&str],
    call_id: &Option<String>,
    out: &mut Vec<ResultText>,
) {
    match content {
        Some(Value::String(_)) => out.push(ResultText {
            pointer: base.to_owned(),
            call_id: call_id.clone(),
        }),
        Some(Value::Array(parts)) => {
            for (i, part) in parts.iter().enumerate() {
                if part
                    .get("type")
                    .and_then(Value::as_str)
                    .is_some_and(|t| part_types.contains(&t))
                    && part.get("text").is_some_and(Value::is_string)
                {
                    out.push(ResultText {
                        pointer: format!("{base}/{i}/text"),
                        call_id: call_id.clone(),
                    });
                }
            }
        }
        _ => {}
    }
}

/// Finds the call a result answers in `earlier`, the messages before it, newest first.
///
/// Results answer the nearest preceding assistant message, so the search stops at the first
/// assistant message that makes the call: O(distance), a handful of messages. Taking an
/// iterator lets callers search history that is split across containers without copying it.
pub fn find_call<'a>(
    earlier: impl IntoIterator<Item = &'a Value>,
    call_id: &str,
    format: MessageFormat,
) -> Option<ToolCall> {
    earlier
        .into_iter()
        .filter(|m| role(m) == Some("assistant"))
        .find_map(|m| tool_calls(m, format).into_iter().find(|c| c.id == call_id))
}

/// Why a conversation breaks the tool-call pairing its API requires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PairViolation {
    /// Index of the offending message.
    pub index: usize,
    /// What is wrong.
    pub reason: String,
}

/// Checks that every tool result answers a call of the assistant message just before it
/// (only other results may sit in between, for OpenAI) and that ids are not answered twice.
/// In the Responses format the assistant's side of a step is a run of items (reasoning, text,
/// calls), so every call of the run is open until the outputs that follow it end.
///
/// A call still unanswered at the end of the list is allowed: the client may be about to run it.
pub fn check_pairs(messages: &[Value], format: MessageFormat) -> Result<(), PairViolation> {
    let mut open: Vec<String> = Vec::new();
    let mut last_assistant: Option<usize> = None;
    let mut after_result = false;
    for (index, message) in messages.iter().enumerate() {
        let ids = result_ids(message, format);
        for id in &ids {
            match open.iter().position(|c| c == id) {
                Some(pos) => {
                    open.remove(pos);
                }
                None => {
                    return Err(PairViolation {
                        index,
                        reason: format!("tool result {id:?} does not answer a call of the preceding assistant message"),
                    });
                }
            }
        }
        // OpenAI answers with a run of `tool` messages; Anthropic answers all calls in the very
        // next message; Responses answers with output items after the step's last call.
        // Anything else arriving while calls are open breaks the pairing.
        let continues_step =
            format == MessageFormat::OpenaiResponses && role(message) == Some("assistant") && !after_result;
        let may_answer_later = format != MessageFormat::Anthropic && role(message) == Some("tool") || continues_step;
        if !may_answer_later && !open.is_empty() {
            return Err(PairViolation {
                index,
                reason: format!(
                    "calls {open:?} of message {} are not answered before this message",
                    last_assistant.unwrap_or(0)
                ),
            });
        }
        if role(message) == Some("assistant") {
            let calls = tool_calls(message, format).into_iter().map(|c| c.id);
            if continues_step {
                open.extend(calls);
            } else {
                open = calls.collect();
            }
            last_assistant = Some(index);
        }
        after_result = !ids.is_empty();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn openai() -> Vec<Value> {
        vec![
            json!({"role": "user", "content": "list files"}),
            json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{\"command\":\"ls\"}"}},
                {"id": "c2", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\":\"README.md\"}"}}]}),
            json!({"role": "tool", "tool_call_id": "c1", "content": "a\nb"}),
            json!({"role": "tool", "tool_call_id": "c2", "content": [{"type": "text", "text": "# hi"}]}),
        ]
    }

    fn anthropic() -> Vec<Value> {
        vec![
            json!({"role": "user", "content": "list files"}),
            json!({"role": "assistant", "content": [
                {"type": "text", "text": "ok"},
                {"type": "tool_use", "id": "t1", "name": "bash", "input": {"command": "ls"}}]}),
            json!({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "a\nb"}], "cache_control": {"type": "ephemeral"}},
                {"type": "text", "text": "go on"}]}),
        ]
    }

    #[test]
    fn a_message_needs_a_known_role() {
        for role in ROLES {
            assert_eq!(role_problem(&json!({"role": role, "content": "x"})), None);
        }
        // A Responses item is placed by its type.
        assert_eq!(
            role_problem(&json!({"type": "reasoning", "encrypted_content": "e"})),
            None
        );
        let problems: Vec<String> = [
            json!({"content": "x"}),
            json!({"role": "robot", "content": "x"}),
            json!({"role": "User", "content": "x"}),
            json!({"role": 1, "content": "x"}),
            json!({"role": null}),
            json!({"type": "message", "content": [{"type": "input_text", "text": "x"}]}),
        ]
        .iter()
        .map(|m| role_problem(m).expect("refused"))
        .collect();
        assert_eq!(
            problems,
            [
                "a message needs a `role` (or, as a Responses item, a `type`)",
                "unknown role \"robot\": expected one of system, developer, user, assistant, tool, function",
                "unknown role \"User\": expected one of system, developer, user, assistant, tool, function",
                "`role` must be a string",
                "`role` must be a string",
                "a `message` item needs a `role`",
            ]
        );
    }

    #[test]
    fn detects_both_formats() {
        assert_eq!(detect(&openai()), Some(MessageFormat::Openai));
        assert_eq!(detect(&anthropic()), Some(MessageFormat::Anthropic));
        assert_eq!(detect(&[json!({"role": "user", "content": "hi"})]), None);
    }

    #[test]
    fn locates_result_texts_and_their_calls() {
        let m = openai();
        let texts: Vec<_> = (0..m.len())
            .flat_map(|i| result_texts(&m[i], MessageFormat::Openai))
            .collect();
        assert_eq!(
            texts.iter().map(|t| t.pointer.as_str()).collect::<Vec<_>>(),
            ["/content", "/content/0/text"]
        );
        let call = find_call(m[..3].iter().rev(), "c2", MessageFormat::Openai).unwrap();
        assert_eq!(call.name, "read_file");
        assert!(call.arguments.contains("README.md"));

        let a = anthropic();
        let texts = result_texts(&a[2], MessageFormat::Anthropic);
        assert_eq!(texts[0].pointer, "/content/0/content/0/text");
        assert_eq!(a[2].pointer(&texts[0].pointer).and_then(Value::as_str), Some("a\nb"));
        assert_eq!(
            find_call(a[..2].iter().rev(), "t1", MessageFormat::Anthropic)
                .unwrap()
                .arguments,
            r#"{"command":"ls"}"#
        );
    }

    #[test]
    fn pair_check_accepts_valid_and_rejects_orphans() {
        assert_eq!(check_pairs(&openai(), MessageFormat::Openai), Ok(()));
        assert_eq!(check_pairs(&anthropic(), MessageFormat::Anthropic), Ok(()));
        let mut broken = openai();
        broken.swap(0, 2);
        assert!(check_pairs(&broken, MessageFormat::Openai).is_err());
        let mut unanswered = openai();
        unanswered.truncate(3);
        unanswered.push(json!({"role": "user", "content": "next"}));
        assert_eq!(check_pairs(&unanswered, MessageFormat::Openai).unwrap_err().index, 3);
        let mut pending = openai();
        pending.truncate(2);
        assert_eq!(check_pairs(&pending, MessageFormat::Openai), Ok(()));
    }
}
