//! Pins: what a client asked to keep verbatim across compactions, as the model reads it.
//!
//! A pinned message still in the live tail is sent where it is (its tool results whole); once
//! a compaction takes it, its text is re-emitted verbatim in the pinned block, right after the
//! summary, after every later compaction too. A pinned text is always in the block.

use serde_json::Value;

use crate::format::{self, MessageFormat};

/// Heading of the block when there is no summary to follow.
pub const PINNED_HEADING: &str = "# Pinned context";

/// One pinned item as the block shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PinnedItem<'a> {
    /// The pin's id (`p1`).
    pub id: &'a str,
    /// What it is: the client's label, or a description (`message 12 (user)`).
    pub title: &'a str,
    /// The verbatim text.
    pub text: &'a str,
}

/// The pinned block: after a summary (`after_summary`) a section of the summary message,
/// else a message of its own under [`PINNED_HEADING`]. Empty when there is nothing to show.
pub fn pinned_block(items: &[PinnedItem<'_>], after_summary: bool) -> String {
    if items.is_empty() {
        return String::new();
    }
    let mut out = String::new();
    out.push_str(if after_summary {
        "## Pinned (kept verbatim across compactions)\n"
    } else {
        "# Pinned context\n\nKept verbatim across compactions.\n"
    });
    for item in items {
        out.push_str(&format!(
            "\n### {}: {}\n\n{}\n",
            item.id,
            item.title,
            item.text.trim_end()
        ));
    }
    out
}

/// The text of a message as a pin shows it: its text, its tool calls (`name(arguments)`),
/// and its tool results, in order.
pub fn message_text(message: &Value, format: MessageFormat) -> String {
    let mut parts: Vec<String> = Vec::new();
    match message.get("content") {
        Some(Value::String(text)) => parts.push(text.clone()),
        Some(Value::Array(blocks)) => {
            for block in blocks {
                match block.get("type").and_then(Value::as_str) {
                    _ if format::is_text_part(block) => {
                        parts.extend(block.get("text").and_then(Value::as_str).map(str::to_owned))
                    }
                    Some("tool_result") => parts.push(result_block_text(block)),
                    _ => {}
                }
            }
        }
        _ => {}
    }
    for call in format::tool_calls(message, format) {
        parts.push(format!("{}({})", call.name, call.arguments));
    }
    // A Responses output keeps its text in `output`, not in `content`.
    if format == MessageFormat::OpenaiResponses {
        let texts = format::result_texts(message, format);
        parts.extend(
            texts
                .iter()
                .filter_map(|t| message.pointer(&t.pointer)?.as_str().map(str::to_owned)),
        );
    }
    parts.retain(|p| !p.trim().is_empty());
    parts.join("\n\n")
}

/// The text of an Anthropic `tool_result` block: a string, or its text blocks.
fn result_block_text(block: &Value) -> String {
    match block.get("content") {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// A message's description for a pin without a label: `message 12 (user)`.
pub fn message_title(index: usize, message: &Value) -> String {
    let role = format::role_of(message).unwrap_or("?");
    format!("message {index} ({role})")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_block_lists_each_pin_verbatim() {
        let items = [
            PinnedItem {
                id: "p1",
                title: "deploy rule",
                text: "Never deploy on Fridays.\n",
            },
            PinnedItem {
                id: "p2",
                title: "message 4 (tool)",
                text: "exit status 101",
            },
        ];
        assert_eq!(
            pinned_block(&items, true),
            "## Pinned (kept verbatim across compactions)\n\n### p1: deploy rule\n\nNever deploy on Fridays.\n\n\
             ### p2: message 4 (tool)\n\nexit status 101\n"
        );
        assert!(
            pinned_block(&items, false).starts_with("# Pinned context\n\nKept verbatim across compactions.\n\n### p1")
        );
        assert_eq!(pinned_block(&[], true), "");
    }

    #[test]
    fn a_message_shows_its_text_calls_and_results() {
        let openai = json!({"role": "assistant", "content": "Running it.", "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "bash", "arguments": "{\"command\":\"make\"}"}}]});
        assert_eq!(
            message_text(&openai, MessageFormat::Openai),
            "Running it.\n\nbash({\"command\":\"make\"})"
        );
        let anthropic = json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t", "content": [{"type": "text", "text": "ok"}]},
            {"type": "text", "text": "next"}]});
        assert_eq!(message_text(&anthropic, MessageFormat::Anthropic), "ok\n\nnext");
        assert_eq!(message_title(4, &anthropic), "message 4 (user)");
    }
}
