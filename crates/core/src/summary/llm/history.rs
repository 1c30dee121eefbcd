//! The span as a model reads it: oldest to newest, one `[role]` line per message and one line
//! per block, every block flattened and cut to head + tail, so one huge output cannot crowd
//! out the conversation or the model's input window (its full text is in the archive).

use std::collections::HashMap;

use satchel_protocol::MessageFormat;
use serde_json::Value;

use super::super::SummaryInput;
use super::super::render::is_summary_text;
use super::THINKING_CHARS;
use crate::format;

/// The span to render, with the tool name of every call so results can name their tool.
pub(super) struct History<'a> {
    pub messages: &'a [Value],
    format: MessageFormat,
    tool_names: HashMap<String, String>,
}

impl<'a> History<'a> {
    pub fn new(input: &SummaryInput<'a>) -> Self {
        let tool_names = input
            .messages
            .iter()
            .flat_map(|m| format::tool_calls(m, input.format))
            .map(|call| (call.id, call.name))
            .collect();
        History {
            messages: input.messages,
            format: input.format,
            tool_names,
        }
    }

    /// Message `index` as `[role]` followed by one line per block, each block cut to
    /// `block_chars`; empty when the message has nothing to show.
    pub fn render(&self, index: usize, block_chars: usize) -> String {
        let message = &self.messages[index];
        let role = format::role_of(message).unwrap_or("unknown");
        let mut blocks: Vec<String> = Vec::new();
        if self.format != MessageFormat::Anthropic && role == "tool" {
            let id = format::result_ids(message, self.format).pop().unwrap_or_default();
            // Responses outputs keep their text in `output`, chat `tool` messages in `content`.
            let output = result_text(message.get("output").or_else(|| message.get("content")));
            blocks.push(self.result_block(&id, false, &output, block_chars));
        } else {
            match message.get("content") {
                Some(Value::String(text)) => push_text(&mut blocks, text, block_chars),
                Some(Value::Array(parts)) => {
                    for part in parts {
                        self.push_part(&mut blocks, part, block_chars);
                    }
                }
                _ => {}
            }
            // Anthropic calls are content blocks, handled above.
            if self.format != MessageFormat::Anthropic {
                for call in format::tool_calls(message, self.format) {
                    blocks.push(cut(
                        &format!("[tool_use] {} {}", call.name, call.arguments),
                        block_chars,
                    ));
                }
            }
        }
        if blocks.is_empty() {
            return String::new();
        }
        format!("[{role}]\n{}", blocks.join("\n"))
    }

    fn push_part(&self, blocks: &mut Vec<String>, part: &Value, block_chars: usize) {
        let kind = match part {
            Value::String(text) => return push_text(blocks, text, block_chars),
            _ => part.get("type").and_then(Value::as_str).unwrap_or(""),
        };
        let field = |key: &str| part.get(key).and_then(Value::as_str).unwrap_or("");
        match kind {
            "text" | "input_text" | "output_text" => push_text(blocks, field("text"), block_chars),
            "thinking" => {
                let thinking = flatten(field("thinking"));
                if !thinking.is_empty() {
                    blocks.push(format!(
                        "[thinking] {}",
                        cut(&thinking, THINKING_CHARS.min(block_chars))
                    ));
                }
            }
            "redacted_thinking" => {}
            "tool_use" => {
                let input = part.get("input").map(Value::to_string).unwrap_or_default();
                blocks.push(cut(&format!("[tool_use] {} {input}", field("name")), block_chars));
            }
            "tool_result" => {
                let error = part.get("is_error").and_then(Value::as_bool) == Some(true);
                let output = result_text(part.get("content"));
                blocks.push(self.result_block(field("tool_use_id"), error, &output, block_chars));
            }
            "image" | "image_url" => blocks.push("[image]".into()),
            "input_audio" => blocks.push("[audio]".into()),
            "" => {}
            other => blocks.push(format!("[{other}]")),
        }
    }

    fn result_block(&self, id: &str, error: bool, output: &str, block_chars: usize) -> String {
        let name = self.tool_names.get(id).map(String::as_str).unwrap_or("");
        let label = match (name.is_empty(), error) {
            (true, false) => "[tool_result]".to_owned(),
            (true, true) => "[tool_result] (error)".to_owned(),
            (false, false) => format!("[tool_result] {name}:"),
            (false, true) => format!("[tool_result] {name} (error):"),
        };
        format!("{label} {}", cut(&flatten(output), block_chars))
    }
}

/// A text block; the summary message of an earlier compaction is skipped, since the previous
/// summary is given to the model on its own.
fn push_text(blocks: &mut Vec<String>, text: &str, block_chars: usize) {
    if is_summary_text(text) {
        return;
    }
    let flat = flatten(text);
    if !flat.is_empty() {
        blocks.push(cut(&flat, block_chars));
    }
}

/// The text of a tool result's content: a string, or the text parts of a list.
fn result_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .map(|part| match part.get("type").and_then(Value::as_str) {
                Some("text" | "input_text" | "output_text") => {
                    part.get("text").and_then(Value::as_str).unwrap_or("").to_owned()
                }
                Some("image" | "image_url" | "input_image") => "[image]".to_owned(),
                Some(other) => format!("[{other}]"),
                None => part.as_str().unwrap_or("").to_owned(),
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

/// One line: lines trimmed, blank ones dropped, joined by spaces (as the peer flattens blocks),
/// so a block can never forge a `[role]` line or a heading of the prompt.
pub(super) fn flatten(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(line);
    }
    out
}

/// `text` cut to about `max` chars: the head and the tail (where errors and results usually
/// are), with the number of chars left out between them.
pub(super) fn cut(text: &str, max: usize) -> String {
    let total = text.chars().count();
    if total <= max {
        return text.to_owned();
    }
    let head = max * 2 / 3;
    let tail = max - head;
    let at = |n: usize| text.char_indices().nth(n).map_or(text.len(), |(i, _)| i);
    format!(
        "{}…[{} chars omitted]…{}",
        &text[..at(head)],
        total - head - tail,
        &text[at(total - tail)..]
    )
}
